// delta_rule (Gated DeltaNet / DeltaNet): finite differences in double of the naive backward (all inputs, with
// and without the decay gate); chunked forward + backward against naive in float over T not a multiple of the
// chunk, T < chunk, chunk 1, several chunk sizes, K != V, a strongly decaying gate (g ≈ −30 per step) and
// DeltaNet (g == nullptr), and a 512-token sequence at K = V = 64; chunked against naive in double to 1e-10;
// finite differences of the chunked pair (sampled); a gate that wipes the state against the closed form; the
// one-token step against the naive forward; chunked results bit-identical between 1 and 2 OpenMP threads. The
// element kernels of the GPU form (element_kernels.h), run on the host, against naive in float and double over the
// same shapes, with the chunked forward's saved states, and independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <vector>

#include "engine/ops/delta_rule/chunked.h"
#include "engine/ops/delta_rule/element_kernels.h"
#include "engine/ops/delta_rule/naive.h"
#include "delta_rule_cases.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

using test::DeltaCase;
using test::DeltaInputs;
using test::Gate;
using test::make_delta_inputs;

template <class T>
struct Grads {
  std::vector<T> o, dq, dk, dv, dbeta, dg;
  Grads(size_t nt, int K, int V, bool gated)
      : o(nt * V, T(7)), dq(nt * K, T(7)), dk(nt * K, T(7)), dv(nt * V, T(7)), dbeta(nt, T(7)), dg(gated ? nt : 0, T(7)) {}
  T* dgp() { return dg.empty() ? nullptr : dg.data(); }
};

template <class T>
Grads<T> run_naive(const DeltaInputs<T>& in, int B, int Tn, int H, int K, int V) {
  Grads<T> r((size_t)B * Tn * H, K, V, in.gp() != nullptr);
  const T scale = T(1.0 / std::sqrt(double(K)));
  delta_rule_forward_naive(r.o.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.gp(), B, Tn, H, K, V,
                           scale);
  delta_rule_backward_naive(r.dq.data(), r.dk.data(), r.dv.data(), r.dbeta.data(), r.dgp(), in.dout.data(),
                            in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.gp(), B, Tn, H, K, V, scale);
  return r;
}

template <class T>
Grads<T> run_chunked(const DeltaInputs<T>& in, int B, int Tn, int H, int K, int V, int chunk) {
  Grads<T> r((size_t)B * Tn * H, K, V, in.gp() != nullptr);
  const T scale = T(1.0 / std::sqrt(double(K)));
  std::vector<T> states(delta_rule_states_size(B, Tn, H, K, V, chunk), T(7));
  delta_rule_forward_chunked(r.o.data(), states.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.gp(),
                             B, Tn, H, K, V, scale, chunk);
  delta_rule_backward_chunked(r.dq.data(), r.dk.data(), r.dv.data(), r.dbeta.data(), r.dgp(), in.dout.data(),
                              states.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.gp(), B, Tn, H,
                              K, V, scale, chunk);
  return r;
}

// The GPU kernels' algorithm on the host; scratch poisoned with NaN (a kernel reading what none wrote shows).
template <class T>
Grads<T> run_elements(const DeltaInputs<T>& in, int B, int Tn, int H, int K, int V, int chunk,
                      std::vector<T>* states_out = nullptr) {
  Grads<T> r((size_t)B * Tn * H, K, V, in.gp() != nullptr);
  const T scale = T(1.0 / std::sqrt(double(K)));
  std::vector<T> states(delta_rule_states_size(B, Tn, H, K, V, chunk), T(7));
  auto scratch_for = [&](bool backward) {
    const size_t bytes = delta_rule_element_scratch_bytes<T>(B, Tn, H, K, V, chunk, backward);
    return std::vector<double>(bytes / sizeof(double) + 1, std::numeric_limits<double>::quiet_NaN());
  };
  std::vector<double> fwd = scratch_for(false), bwd = scratch_for(true);
  delta_rule_forward_elements(HostLaunch{}, fwd.data(), r.o.data(), states.data(), in.q.data(), in.k.data(),
                              in.v.data(), in.beta.data(), in.gp(), B, Tn, H, K, V, scale, chunk);
  delta_rule_backward_elements(HostLaunch{}, bwd.data(), r.dq.data(), r.dk.data(), r.dv.data(), r.dbeta.data(),
                               r.dgp(), in.dout.data(), states.data(), in.q.data(), in.k.data(), in.v.data(),
                               in.beta.data(), in.gp(), B, Tn, H, K, V, scale, chunk);
  if (states_out) *states_out = states;
  return r;
}

template <class T>
void expect_close(const Grads<T>& got, const Grads<T>& want, double rtol, double atol, const std::string& what) {
  auto check = [&](const std::vector<T>& a, const std::vector<T>& b, const char* name) {
    ASSERT_EQ(a.size(), b.size()) << name;
    for (T x : a) ASSERT_TRUE(std::isfinite(double(x))) << what << " " << name << " not finite";
    auto c = compare(a.data(), b.data(), a.size(), rtol, atol);
    EXPECT_TRUE(c.ok) << what << " " << name << " " << c.message;
  };
  check(got.o, want.o, "o");
  check(got.dq, want.dq, "dq");
  check(got.dk, want.dk, "dk");
  check(got.dv, want.dv, "dv");
  check(got.dbeta, want.dbeta, "dbeta");
  check(got.dg, want.dg, "dg");
}

// ---- chunked against naive ----

class OpsDeltaRuleChunkedVsNaive : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(OpsDeltaRuleChunkedVsNaive, MatchesInFloat) {
  const auto p = GetParam();
  auto in = make_delta_inputs<float>(p.B, p.Tn, p.H, p.K, p.V, p.gate, 100);
  auto want = run_naive(in, p.B, p.Tn, p.H, p.K, p.V);
  auto got = run_chunked(in, p.B, p.Tn, p.H, p.K, p.V, p.chunk);
  // fp32 accumulation against a double reference; values are O(1). The worst cases sit near a tenth of this.
  expect_close(got, want, 1e-4, 1e-5, "float");
}

TEST_P(OpsDeltaRuleChunkedVsNaive, MatchesInDouble) {
  const auto p = GetParam();
  auto in = make_delta_inputs<double>(p.B, p.Tn, p.H, p.K, p.V, p.gate, 200);
  auto want = run_naive(in, p.B, p.Tn, p.H, p.K, p.V);
  auto got = run_chunked(in, p.B, p.Tn, p.H, p.K, p.V, p.chunk);
  expect_close(got, want, 1e-10, 1e-12, "double");
}

TEST_P(OpsDeltaRuleChunkedVsNaive, ElementKernelsMatchInFloatAndDouble) {
  const auto p = GetParam();
  auto in = make_delta_inputs<float>(p.B, p.Tn, p.H, p.K, p.V, p.gate, 100);
  expect_close(run_elements(in, p.B, p.Tn, p.H, p.K, p.V, p.chunk), run_naive(in, p.B, p.Tn, p.H, p.K, p.V), 1e-4,
               1e-5, "elements float");
  auto ind = make_delta_inputs<double>(p.B, p.Tn, p.H, p.K, p.V, p.gate, 200);
  std::vector<double> states;
  expect_close(run_elements(ind, p.B, p.Tn, p.H, p.K, p.V, p.chunk, &states), run_naive(ind, p.B, p.Tn, p.H, p.K, p.V),
               1e-10, 1e-12, "elements double");
  std::vector<double> chunked_states(states.size()), o((size_t)p.B * p.Tn * p.H * p.V);
  delta_rule_forward_chunked(o.data(), chunked_states.data(), ind.q.data(), ind.k.data(), ind.v.data(),
                             ind.beta.data(), ind.gp(), p.B, p.Tn, p.H, p.K, p.V, 1.0 / std::sqrt(double(p.K)), p.chunk);
  const auto c = compare(states.data(), chunked_states.data(), states.size(), 1e-10, 1e-12);
  EXPECT_TRUE(c.ok) << "saved chunk-start states " << c.message;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OpsDeltaRuleChunkedVsNaive,
    ::testing::Values(
        // T a multiple of the chunk, T not a multiple, T < chunk, chunk 1, several chunk sizes
        DeltaCase{2, 64, 2, 16, 16, 16, Gate::kMild}, DeltaCase{2, 37, 2, 16, 16, 16, Gate::kMild},
        DeltaCase{2, 37, 2, 16, 16, 64, Gate::kMild}, DeltaCase{2, 9, 3, 8, 8, 1, Gate::kMild},
        DeltaCase{1, 130, 2, 32, 32, 32, Gate::kMild}, DeltaCase{1, 100, 2, 16, 16, 7, Gate::kMild},
        DeltaCase{1, 1, 2, 8, 8, 64, Gate::kMild}, DeltaCase{1, 200, 4, 32, 32, 64, Gate::kMild},
        // K != V (GDN's expand_v > expand_k), odd head dims; 24 x 48 and 32 x 64 are compile-time shapes of the
        // float backward, 12 x 20 and 20 x 9 take its general path
        DeltaCase{2, 45, 2, 12, 20, 16, Gate::kMild}, DeltaCase{1, 33, 2, 20, 9, 8, Gate::kMild},
        DeltaCase{1, 70, 2, 24, 48, 32, Gate::kMild}, DeltaCase{1, 40, 2, 32, 64, 16, Gate::kMild},
        // strongly decaying gate: about −30 per step, so cumulative log decay of −480 to −1920 within a chunk
        DeltaCase{2, 70, 2, 16, 16, 16, Gate::kStrong}, DeltaCase{1, 150, 2, 16, 24, 64, Gate::kStrong},
        DeltaCase{1, 10, 2, 8, 8, 1, Gate::kStrong},
        // the forward's blocked substitution over several 16-row diagonal blocks, the last one ragged, with V not a
        // multiple of 16
        DeltaCase{1, 100, 2, 12, 20, 48, Gate::kMild}, DeltaCase{1, 90, 2, 16, 24, 40, Gate::kStrong},
        // DeltaNet: no decay gate
        DeltaCase{2, 37, 2, 16, 16, 16, Gate::kNone}, DeltaCase{1, 200, 2, 32, 32, 64, Gate::kNone},
        DeltaCase{1, 11, 2, 8, 12, 1, Gate::kNone}, DeltaCase{1, 20, 2, 8, 8, 64, Gate::kNone}));

// Long sequence at a typical training shape; the state keeps being rewritten, so errors must not drift.
TEST(OpsDeltaRule, ChunkedMatchesNaiveLongSequence) {
  const int B = 1, Tn = 512, H = 4, K = 64, V = 64;
  for (Gate gate : {Gate::kMild, Gate::kNone}) {
    auto in = make_delta_inputs<float>(B, Tn, H, K, V, gate, 300);
    auto want = run_naive(in, B, Tn, H, K, V);
    auto got = run_chunked(in, B, Tn, H, K, V, 64);
    expect_close(got, want, 1e-4, 1e-5, gate == Gate::kNone ? "deltanet" : "gdn");
  }
}

// Where the gate wipes the state each step, o_t depends only on token t: o_t = scale β_t (q_t·k_t) v_t (in the
// limit). Pins the strong-decay case to an independent value, not just to naive.
TEST(OpsDeltaRule, StrongDecayForgetsThePast) {
  const int B = 1, Tn = 40, H = 2, K = 8, V = 8;
  auto in = make_delta_inputs<float>(B, Tn, H, K, V, Gate::kStrong, 400);
  for (auto& x : in.g) x = -200.f;
  auto got = run_chunked(in, B, Tn, H, K, V, 16);
  const float scale = 1.f / std::sqrt(float(K));
  for (int t = 0; t < Tn; t++)
    for (int h = 0; h < H; h++) {
      const size_t r = (size_t)t * H + h;
      float qk = 0;
      for (int i = 0; i < K; i++) qk += in.q[r * K + i] * in.k[r * K + i];
      for (int j = 0; j < V; j++)
        EXPECT_NEAR(got.o[r * V + j], scale * in.beta[r] * qk * in.v[r * V + j], 1e-6) << "t " << t << " h " << h;
    }
}

// ---- the one-token step ----

TEST(OpsDeltaRule, StepMatchesNaiveForward) {
  const int B = 2, Tn = 23, H = 3, K = 8, V = 12;
  for (Gate gate : {Gate::kMild, Gate::kNone}) {
    auto in = make_delta_inputs<double>(B, Tn, H, K, V, gate, 500);
    const double scale = 1.0 / std::sqrt(double(K));
    const size_t nt = (size_t)B * Tn * H;
    std::vector<double> want(nt * V), got(nt * V, 7.0);
    delta_rule_forward_naive(want.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.gp(), B, Tn, H, K,
                             V, scale);
    for (int b = 0; b < B; b++) {
      std::vector<double> state((size_t)H * K * V, 0.0);
      for (int t = 0; t < Tn; t++) {
        const size_t bt = (size_t)b * Tn + t;
        delta_rule_step(got.data() + bt * H * V, state.data(), in.q.data() + bt * H * K, in.k.data() + bt * H * K,
                        in.v.data() + bt * H * V, in.beta.data() + bt * H, in.gp() ? in.gp() + bt * H : nullptr, H, K,
                        V, scale);
      }
    }
    // the same double arithmetic in the same order
    auto c = compare(got.data(), want.data(), got.size(), 1e-14, 1e-15);
    EXPECT_TRUE(c.ok) << c.message;
  }
  // float state against the double-state naive loop
  auto in = make_delta_inputs<float>(1, 50, 2, 16, 16, Gate::kMild, 600);
  std::vector<float> want(50 * 2 * 16), got(want.size());
  delta_rule_forward_naive(want.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.gp(), 1, 50, 2, 16,
                           16, 0.25f);
  std::vector<float> state(2 * 16 * 16, 0.f);
  for (int t = 0; t < 50; t++)
    delta_rule_step(got.data() + t * 32, state.data(), in.q.data() + t * 32, in.k.data() + t * 32,
                    in.v.data() + t * 32, in.beta.data() + t * 2, in.gp() + t * 2, 2, 16, 16, 0.25f);
  auto c = compare(got.data(), want.data(), got.size(), 1e-5, 1e-6);
  EXPECT_TRUE(c.ok) << c.message;
}

// ---- finite differences ----

template <bool Chunked>
void gradcheck_delta(int B, int Tn, int H, int K, int V, Gate gate, int chunk, size_t max_points) {
  auto in = make_delta_inputs<double>(B, Tn, H, K, V, gate, 700);
  // a loss on o only; q and k are nudged off the unit sphere, which the math must not mind
  const size_t nt = (size_t)B * Tn * H;
  const double scale = 1.0 / std::sqrt(double(K));
  std::vector<double> o(nt * V), states(delta_rule_states_size(B, Tn, H, K, V, chunk));
  double* gp = in.g.empty() ? nullptr : in.g.data();
  auto loss = [&] {
    if (Chunked)
      delta_rule_forward_chunked(o.data(), states.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), gp, B,
                                 Tn, H, K, V, scale, chunk);
    else
      delta_rule_forward_naive(o.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), gp, B, Tn, H, K, V,
                               scale);
    return test::dot(o, in.dout);
  };
  Grads<double> gr(nt, K, V, gp != nullptr);
  loss();  // leaves the states of the unperturbed inputs
  if (Chunked)
    delta_rule_backward_chunked(gr.dq.data(), gr.dk.data(), gr.dv.data(), gr.dbeta.data(), gr.dgp(), in.dout.data(),
                                states.data(), in.q.data(), in.k.data(), in.v.data(), in.beta.data(), gp, B, Tn, H, K,
                                V, scale, chunk);
  else
    delta_rule_backward_naive(gr.dq.data(), gr.dk.data(), gr.dv.data(), gr.dbeta.data(), gr.dgp(), in.dout.data(),
                              in.q.data(), in.k.data(), in.v.data(), in.beta.data(), gp, B, Tn, H, K, V, scale);
  test::GradcheckOptions opt;
  opt.max_points = max_points;
  const char* gname = gate == Gate::kNone ? "deltanet" : "gdn";
  auto r = test::gradcheck(loss, in.q.data(), in.q.size(), gr.dq.data(), opt);
  EXPECT_TRUE(r.ok) << gname << " dq " << r.message;
  r = test::gradcheck(loss, in.k.data(), in.k.size(), gr.dk.data(), opt);
  EXPECT_TRUE(r.ok) << gname << " dk " << r.message;
  r = test::gradcheck(loss, in.v.data(), in.v.size(), gr.dv.data(), opt);
  EXPECT_TRUE(r.ok) << gname << " dv " << r.message;
  r = test::gradcheck(loss, in.beta.data(), in.beta.size(), gr.dbeta.data(), opt);
  EXPECT_TRUE(r.ok) << gname << " dbeta " << r.message;
  if (gp) {
    r = test::gradcheck(loss, in.g.data(), in.g.size(), gr.dg.data(), opt);
    EXPECT_TRUE(r.ok) << gname << " dg " << r.message;
  }
}

TEST(OpsDeltaRule, GradcheckNaive) {
  gradcheck_delta<false>(2, 6, 2, 3, 4, Gate::kMild, 1, 0);
  gradcheck_delta<false>(2, 6, 2, 3, 4, Gate::kNone, 1, 0);
  gradcheck_delta<false>(1, 9, 1, 5, 3, Gate::kMild, 1, 0);
}
TEST(OpsDeltaRule, GradcheckChunked) {
  // Hundreds of tiny forward calls: one thread keeps them from waiting on each other's barriers on a busy machine
  // (threads are covered by ChunkedBitIdenticalAcrossThreadCounts).
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  gradcheck_delta<true>(2, 11, 2, 4, 5, Gate::kMild, 4, 60);
  gradcheck_delta<true>(2, 11, 2, 4, 5, Gate::kNone, 3, 60);
  omp_set_num_threads(saved);
}

// ---- threads ----

TEST(OpsDeltaRule, ChunkedBitIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  const int B = 3, Tn = 77, H = 3, K = 16, V = 24, chunk = 32;
  for (Gate gate : {Gate::kMild, Gate::kNone}) {
    auto in = make_delta_inputs<float>(B, Tn, H, K, V, gate, 800);
    omp_set_num_threads(1);
    auto one = run_chunked(in, B, Tn, H, K, V, chunk);
    omp_set_num_threads(2);
    auto two = run_chunked(in, B, Tn, H, K, V, chunk);
    EXPECT_EQ(one.o, two.o);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
    EXPECT_EQ(one.dbeta, two.dbeta);
    EXPECT_EQ(one.dg, two.dg);
  }
  omp_set_num_threads(saved);
}

TEST(OpsDeltaRule, ElementKernelsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  auto in = make_delta_inputs<float>(3, 100, 2, 16, 24, Gate::kMild, 700);
  omp_set_num_threads(1);
  auto one = run_elements(in, 3, 100, 2, 16, 24, 32);
  omp_set_num_threads(2);
  auto two = run_elements(in, 3, 100, 2, 16, 24, 32);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.o, two.o);
  EXPECT_EQ(one.dq, two.dq);
  EXPECT_EQ(one.dk, two.dk);
  EXPECT_EQ(one.dv, two.dv);
  EXPECT_EQ(one.dbeta, two.dbeta);
  EXPECT_EQ(one.dg, two.dg);
}

TEST(OpsDeltaRule, RejectsBadArguments) {
  EXPECT_THROW(delta_rule_states_size(1, 4, 1, 2, 2, 0), Error);
  std::vector<float> x(64), st(64);
  EXPECT_THROW(delta_rule_forward_chunked(x.data(), st.data(), x.data(), x.data(), x.data(), x.data(), x.data(), 1, 4,
                                          1, 2, 2, 1.f, 0),
               Error);
  // dg without g
  EXPECT_THROW(delta_rule_backward_chunked(x.data(), x.data(), x.data(), x.data(), x.data(), x.data(), st.data(),
                                           x.data(), x.data(), x.data(), x.data(), (const float*)nullptr, 1, 4, 1, 2, 2,
                                           1.f, 4),
               Error);
}

}  // namespace
}  // namespace canonlab
