// gla: finite differences of the naive backward (and of the chunked one) in double; chunked forward and
// backward against naive in float for several T and chunk sizes (T not a multiple of the chunk, T < chunk,
// chunk 1, chunks that are not a multiple of the score sub-chunk) and gate regimes, including strong decay
// (−20 per step on half the channels, 0 on the rest); chunked against naive in double to 1e-10; the saved
// chunk-start states and gla_step against the naive recurrence; chunked results independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <tuple>
#include <vector>

#include "engine/ops/gla/chunked.h"
#include "engine/ops/gla/element_kernels.h"
#include "engine/ops/gla/naive.h"
#include "gla_cases.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

// The cases below reach the off-diagonal score blocks (chunk 20 and up) only while sub-chunks are this small.
static_assert(gla_detail::kSub <= 16, "extend the chunk sizes of the tests to cover the off-diagonal blocks");

double rms(const std::vector<double>& x) {
  double s = 0;
  for (double e : x) s += e * e;
  return std::sqrt(s / std::max<size_t>(1, x.size()));
}
template <class T>
std::vector<double> to_double(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// |got − want| <= tol · (|want| + rms(want)) elementwise: relative where values are large, and relative to the
// tensor's typical size where an entry happens to be near zero (cancellation inside a sum).
template <class A, class B>
test::CompareResult close(const std::vector<A>& got, const std::vector<B>& want, double tol) {
  return compare(got.data(), want.data(), want.size(), tol, tol * rms(to_double(want)));
}

using Case = test::GlaCase;
using test::Gates;
template <class T>
using Inputs = test::GlaInputs<T>;

template <class T>
struct Outputs {
  std::vector<T> o, dq, dk, dv, dg;
  Outputs(const Case& p)
      : o((size_t)p.B * p.Tn * p.H * p.V, T(7)), dq((size_t)p.B * p.Tn * p.H * p.K, T(7)), dk(dq), dv(o), dg(dq) {}
};

template <class T>
Outputs<T> run_naive(const Case& p, const Inputs<T>& in, T scale) {
  Outputs<T> r(p);
  gla_forward_naive(r.o.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale);
  gla_backward_naive(r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(), in.dout.data(), in.q.data(), in.k.data(),
                     in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale);
  return r;
}

template <class T>
Outputs<T> run_chunked(const Case& p, const Inputs<T>& in, T scale, std::vector<T>* states_out = nullptr) {
  Outputs<T> r(p);
  std::vector<T> states(gla_states_size(p.B, p.Tn, p.H, p.K, p.V, p.chunk), T(7));
  gla_forward_chunked(r.o.data(), states.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H,
                      p.K, p.V, scale, p.chunk);
  gla_backward_chunked(r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(), in.dout.data(), states.data(), in.q.data(),
                       in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale, p.chunk);
  if (states_out) *states_out = states;
  return r;
}

// The GPU kernels' algorithm on the host; scratch poisoned with NaN (a kernel reading what none wrote shows).
template <class T>
Outputs<T> run_elements(const Case& p, const Inputs<T>& in, T scale, std::vector<T>* states_out = nullptr) {
  Outputs<T> r(p);
  std::vector<T> states(gla_states_size(p.B, p.Tn, p.H, p.K, p.V, p.chunk), T(7));
  auto scratch_for = [&](bool backward) {
    const size_t bytes = gla_element_scratch_bytes<T>(p.B, p.Tn, p.H, p.K, p.V, p.chunk, backward);
    return std::vector<double>(bytes / sizeof(double) + 1, std::numeric_limits<double>::quiet_NaN());
  };
  std::vector<double> fwd = scratch_for(false), bwd = scratch_for(true);
  gla_forward_elements(HostLaunch{}, fwd.data(), r.o.data(), states.data(), in.q.data(), in.k.data(), in.v.data(),
                       in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale, p.chunk);
  gla_backward_elements(HostLaunch{}, bwd.data(), r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(), in.dout.data(),
                        states.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V,
                        scale, p.chunk);
  if (states_out) *states_out = states;
  return r;
}

template <class T>
bool all_finite(const std::vector<T>& x) {
  for (T e : x)
    if (!std::isfinite(e)) return false;
  return true;
}

// ---- chunked vs naive ----

class OpsGlaChunkedVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(OpsGlaChunkedVsNaive, MatchesInFloat) {
  const Case p = GetParam();
  Inputs<float> in(p, 10);
  const float scale = 1.0f / std::sqrt(float(p.K));
  const auto want = run_naive(p, in, scale);
  const auto got = run_chunked(p, in, scale);
  for (const auto* x : {&got.o, &got.dq, &got.dk, &got.dv, &got.dg}) EXPECT_TRUE(all_finite(*x));
  const double tol = 1e-4;
  auto c = close(got.o, want.o, tol);
  EXPECT_TRUE(c.ok) << "o " << c.message;
  c = close(got.dq, want.dq, tol);
  EXPECT_TRUE(c.ok) << "dq " << c.message;
  c = close(got.dk, want.dk, tol);
  EXPECT_TRUE(c.ok) << "dk " << c.message;
  c = close(got.dv, want.dv, tol);
  EXPECT_TRUE(c.ok) << "dv " << c.message;
  c = close(got.dg, want.dg, tol);
  EXPECT_TRUE(c.ok) << "dg " << c.message;
}

TEST_P(OpsGlaChunkedVsNaive, MatchesInDouble) {
  const Case p = GetParam();
  Inputs<double> in(p, 20);
  const double scale = 1.0 / std::sqrt(double(p.K));
  const auto want = run_naive(p, in, scale);
  const auto got = run_chunked(p, in, scale);
  const double tol = 1e-10;
  auto c = close(got.o, want.o, tol);
  EXPECT_TRUE(c.ok) << "o " << c.message;
  c = close(got.dq, want.dq, tol);
  EXPECT_TRUE(c.ok) << "dq " << c.message;
  c = close(got.dk, want.dk, tol);
  EXPECT_TRUE(c.ok) << "dk " << c.message;
  c = close(got.dv, want.dv, tol);
  EXPECT_TRUE(c.ok) << "dv " << c.message;
  c = close(got.dg, want.dg, tol);
  EXPECT_TRUE(c.ok) << "dg " << c.message;
}

// The element kernels of the GPU form (element_kernels.h) on the host: the same tolerances as the chunked form,
// and the saved chunk-start states equal to the chunked form's.
TEST_P(OpsGlaChunkedVsNaive, ElementKernelsMatchInFloatAndDouble) {
  const Case p = GetParam();
  Inputs<float> in(p, 10);
  const float scale = 1.0f / std::sqrt(float(p.K));
  const auto want = run_naive(p, in, scale);
  const auto got = run_elements(p, in, scale);
  for (const auto* x : {&got.o, &got.dq, &got.dk, &got.dv, &got.dg}) EXPECT_TRUE(all_finite(*x));
  const struct {
    const std::vector<float>& got;
    const std::vector<float>& want;
    const char* name;
  } floats[] = {{got.o, want.o, "o"}, {got.dq, want.dq, "dq"}, {got.dk, want.dk, "dk"}, {got.dv, want.dv, "dv"},
                {got.dg, want.dg, "dg"}};
  for (const auto& f : floats) {
    const auto c = close(f.got, f.want, 1e-4);
    EXPECT_TRUE(c.ok) << "float " << f.name << " " << c.message;
  }
  Inputs<double> ind(p, 20);
  const double scaled = 1.0 / std::sqrt(double(p.K));
  std::vector<double> states, chunked_states;
  const auto wantd = run_naive(p, ind, scaled);
  const auto gotd = run_elements(p, ind, scaled, &states);
  run_chunked(p, ind, scaled, &chunked_states);
  const struct {
    const std::vector<double>& got;
    const std::vector<double>& want;
    const char* name;
  } doubles[] = {{gotd.o, wantd.o, "o"}, {gotd.dq, wantd.dq, "dq"}, {gotd.dk, wantd.dk, "dk"},
                 {gotd.dv, wantd.dv, "dv"}, {gotd.dg, wantd.dg, "dg"}};
  for (const auto& d : doubles) {
    const auto c = close(d.got, d.want, 1e-10);
    EXPECT_TRUE(c.ok) << "double " << d.name << " " << c.message;
  }
  // (a single chunk's saved state is all zeros, where close() has no scale)
  const auto c = compare(states.data(), chunked_states.data(), states.size(), 1e-10, 1e-12);
  EXPECT_TRUE(c.ok) << "double states " << c.message;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OpsGlaChunkedVsNaive,
    ::testing::Values(
        // T a multiple of the chunk, T not a multiple, T < chunk, one chunk exactly
        Case{2, 128, 2, 16, 32, 64, Gates::Mild}, Case{2, 150, 2, 32, 16, 64, Gates::Mild},
        Case{2, 37, 2, 16, 32, 64, Gates::Wide}, Case{1, 64, 3, 32, 32, 64, Gates::Wide},
        // chunk 1 (pure recurrence through the states), chunks off the 16-row sub-chunk grid, chunk 16
        Case{2, 23, 2, 8, 8, 1, Gates::Wide}, Case{2, 77, 2, 16, 24, 20, Gates::Wide},
        Case{1, 100, 2, 24, 16, 48, Gates::Mild}, Case{2, 70, 2, 16, 16, 16, Gates::Wide},
        Case{1, 90, 2, 16, 16, 5, Gates::Mild}, Case{1, 200, 1, 16, 16, 200, Gates::Wide},
        // head dims that are not a multiple of the 16-channel groups of the diagonal-block gradient
        Case{2, 70, 2, 20, 12, 48, Gates::Wide}, Case{1, 50, 2, 3, 5, 32, Gates::Mild},
        // larger head dims as in training
        Case{1, 256, 2, 64, 128, 64, Gates::Mild},
        // no decay, and strong decay on half the channels (−1280 accumulated over a chunk of 64)
        Case{2, 150, 2, 16, 32, 64, Gates::Zero}, Case{2, 200, 2, 16, 32, 64, Gates::Strong},
        Case{1, 130, 2, 32, 16, 32, Gates::Strong}, Case{1, 41, 2, 8, 8, 7, Gates::Strong},
        Case{1, 200, 1, 16, 16, 200, Gates::Strong}));

// A long strongly decaying sequence: every exponential of the chunked form must stay finite, and the outputs
// must still match the recurrence.
TEST(OpsGla, StrongDecayIsFiniteAndMatches) {
  const Case p{2, 512, 4, 32, 32, 64, Gates::Strong};
  Inputs<float> in(p, 30);
  const float scale = 1.0f / std::sqrt(float(p.K));
  std::vector<float> states;
  const auto got = run_chunked(p, in, scale, &states);
  const std::vector<float>& saved_states = states;
  for (const auto* x : {&got.o, &got.dq, &got.dk, &got.dv, &got.dg, &saved_states}) EXPECT_TRUE(all_finite(*x));
  const auto want = run_naive(p, in, scale);
  for (auto [x, y, name] :
       {std::tuple{&got.o, &want.o, "o"}, std::tuple{&got.dq, &want.dq, "dq"}, std::tuple{&got.dk, &want.dk, "dk"},
        std::tuple{&got.dv, &want.dv, "dv"}, std::tuple{&got.dg, &want.dg, "dg"}}) {
    auto c = close(*x, *y, 1e-4);
    EXPECT_TRUE(c.ok) << name << " " << c.message;
  }
}

// ---- finite differences ----

// loss = Σ o ⊙ r; checks dq, dk, dv, dg of either backward against central differences in double.
template <bool Chunked>
void gradcheck_gla(const Case& p) {
  Inputs<double> in(p, 40);
  const double scale = 1.0 / std::sqrt(double(p.K));
  auto r = random_vector((size_t)p.B * p.Tn * p.H * p.V, 99);
  std::vector<double> o(r.size()), states(gla_states_size(p.B, p.Tn, p.H, p.K, p.V, p.chunk));
  auto loss = [&] {
    if (Chunked)
      gla_forward_chunked(o.data(), states.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H,
                          p.K, p.V, scale, p.chunk);
    else
      gla_forward_naive(o.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale);
    return test::dot(o, r);
  };
  Outputs<double> d(p);
  loss();  // leaves the states of the unperturbed inputs for the chunked backward
  if (Chunked)
    gla_backward_chunked(d.dq.data(), d.dk.data(), d.dv.data(), d.dg.data(), r.data(), states.data(), in.q.data(),
                         in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale, p.chunk);
  else
    gla_backward_naive(d.dq.data(), d.dk.data(), d.dv.data(), d.dg.data(), r.data(), in.q.data(), in.k.data(),
                       in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V, scale);
  // The chunked path is already pinned to naive in double; a sample keeps its many threaded calls cheap.
  test::GradcheckOptions opt;
  opt.max_points = Chunked ? 40 : 0;
  auto check = [&](std::vector<double>& x, const std::vector<double>& dx, const char* name) {
    auto res = test::gradcheck(loss, x.data(), x.size(), dx.data(), opt);
    EXPECT_TRUE(res.ok) << name << " (" << p << ") " << res.message;
  };
  check(in.q, d.dq, "dq");
  check(in.k, d.dk, "dk");
  check(in.v, d.dv, "dv");
  check(in.g, d.dg, "dg");
}

TEST(OpsGla, GradcheckNaive) {
  gradcheck_gla<false>(Case{2, 7, 2, 3, 4, 1, Gates::Wide});
  gradcheck_gla<false>(Case{1, 9, 1, 4, 2, 1, Gates::Mild});
  gradcheck_gla<false>(Case{1, 1, 2, 2, 3, 1, Gates::Wide});
}

TEST(OpsGla, GradcheckChunked) {
  // chunk 4: diagonal blocks only; chunk 20 over T = 37: off-diagonal blocks and a short last chunk
  gradcheck_gla<true>(Case{2, 11, 2, 3, 2, 4, Gates::Wide});
  gradcheck_gla<true>(Case{1, 37, 1, 2, 2, 20, Gates::Wide});
}

// ---- states and decoding ----

// The saved chunk-start states are the recurrence's states at t = c·chunk (zero for the first chunk), and
// gla_step over t reproduces the naive forward.
TEST(OpsGla, StepAndStatesMatchRecurrence) {
  const Case p{2, 45, 3, 8, 12, 16, Gates::Wide};
  Inputs<double> in(p, 50);
  const double scale = 0.3;
  std::vector<double> o_naive((size_t)p.B * p.Tn * p.H * p.V), o_chunk(o_naive.size()), o_step(o_naive.size());
  std::vector<double> states(gla_states_size(p.B, p.Tn, p.H, p.K, p.V, p.chunk));
  gla_forward_naive(o_naive.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H, p.K, p.V,
                    scale);
  gla_forward_chunked(o_chunk.data(), states.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), p.B, p.Tn, p.H,
                      p.K, p.V, scale, p.chunk);
  const int nc = (p.Tn + p.chunk - 1) / p.chunk;
  const size_t hkv = (size_t)p.H * p.K * p.V;
  for (int b = 0; b < p.B; b++) {
    std::vector<double> state(hkv, 0.0);
    for (int t = 0; t < p.Tn; t++) {
      if (t % p.chunk == 0)
        for (int h = 0; h < p.H; h++) {
          const double* saved = states.data() + (((size_t)b * p.H + h) * nc + t / p.chunk) * p.K * p.V;
          auto c = compare(saved, state.data() + (size_t)h * p.K * p.V, (size_t)p.K * p.V, 1e-12, 1e-12);
          EXPECT_TRUE(c.ok) << "state b " << b << " h " << h << " t " << t << " " << c.message;
        }
      const size_t tk = ((size_t)b * p.Tn + t) * p.H * p.K, tv = ((size_t)b * p.Tn + t) * p.H * p.V;
      gla_step(o_step.data() + tv, state.data(), in.q.data() + tk, in.k.data() + tk, in.v.data() + tv, in.g.data() + tk,
               p.H, p.K, p.V, scale);
    }
  }
  auto c = compare(o_step.data(), o_naive.data(), o_naive.size(), 1e-13, 1e-13);
  EXPECT_TRUE(c.ok) << "step " << c.message;
  c = compare(o_chunk.data(), o_naive.data(), o_naive.size(), 1e-10, 1e-10);
  EXPECT_TRUE(c.ok) << "chunked " << c.message;

  // float steps (float state) against the double-state naive forward
  Inputs<float> inf(p, 50);
  std::vector<float> of_naive(o_naive.size()), of_step(o_naive.size()), state((size_t)p.B * hkv, 0.f);
  gla_forward_naive(of_naive.data(), inf.q.data(), inf.k.data(), inf.v.data(), inf.g.data(), p.B, p.Tn, p.H, p.K, p.V,
                    0.3f);
  for (int b = 0; b < p.B; b++)
    for (int t = 0; t < p.Tn; t++) {
      const size_t tk = ((size_t)b * p.Tn + t) * p.H * p.K, tv = ((size_t)b * p.Tn + t) * p.H * p.V;
      gla_step(of_step.data() + tv, state.data() + b * hkv, inf.q.data() + tk, inf.k.data() + tk, inf.v.data() + tv,
               inf.g.data() + tk, p.H, p.K, p.V, 0.3f);
    }
  c = close(of_step, of_naive, 1e-5);
  EXPECT_TRUE(c.ok) << "float step " << c.message;
}

// ---- threads ----

TEST(OpsGla, ChunkedDoesNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  const Case p{3, 150, 2, 16, 32, 64, Gates::Wide};  // 6 (b, h) pairs: uneven split over 4 threads
  Inputs<float> in(p, 60);
  std::vector<Outputs<float>> runs;
  std::vector<std::vector<float>> states(3);
  int idx = 0;
  for (int threads : {1, 2, 4}) {
    omp_set_num_threads(threads);
    runs.push_back(run_chunked(p, in, 0.25f, &states[idx++]));
  }
  omp_set_num_threads(saved);
  for (int i = 1; i < 3; i++) {
    EXPECT_EQ(runs[0].o, runs[i].o) << i;
    EXPECT_EQ(states[0], states[i]) << i;
    EXPECT_EQ(runs[0].dq, runs[i].dq) << i;
    EXPECT_EQ(runs[0].dk, runs[i].dk) << i;
    EXPECT_EQ(runs[0].dv, runs[i].dv) << i;
    EXPECT_EQ(runs[0].dg, runs[i].dg) << i;
  }
}

TEST(OpsGla, ElementKernelsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  const Case p{3, 150, 2, 16, 32, 64, Gates::Wide};
  Inputs<float> in(p, 60);
  std::vector<Outputs<float>> runs;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    runs.push_back(run_elements(p, in, 0.25f));
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(runs[0].o, runs[1].o);
  EXPECT_EQ(runs[0].dq, runs[1].dq);
  EXPECT_EQ(runs[0].dk, runs[1].dk);
  EXPECT_EQ(runs[0].dv, runs[1].dv);
  EXPECT_EQ(runs[0].dg, runs[1].dg);
}

TEST(OpsGla, RejectsChunkBelowOne) {
  std::vector<float> x(64), st(64);
  EXPECT_THROW(gla_forward_chunked(x.data(), st.data(), x.data(), x.data(), x.data(), x.data(), 1, 2, 1, 2, 2, 1.f, 0),
               Error);
  EXPECT_THROW(gla_backward_chunked(x.data(), x.data(), x.data(), x.data(), x.data(), st.data(), x.data(), x.data(),
                                    x.data(), x.data(), 1, 2, 1, 2, 2, 1.f, 0),
               Error);
}

}  // namespace
}  // namespace canonlab
