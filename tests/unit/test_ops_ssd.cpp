// ssd (Mamba2 scan): naive backward against finite differences in double; chunked forward and backward
// against naive in float (several T and chunk sizes, T not a multiple of the chunk, T < chunk, chunk 1,
// grouped B/C, strongly decaying gates) and in double to 1e-10; the step function against the naive forward;
// a hand-computed two-token case; chunked results bit-identical for 1 and 2 OpenMP threads. The element
// kernels of the GPU scan (element_kernels.h), run on the host, against naive in float and double, with the chunked
// forward's saved states, and independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <vector>

#include "engine/ops/ssd/chunked.h"
#include "engine/ops/ssd/naive.h"
#include "engine/ops/ssd/element_kernels.h"
#include "gradcheck.h"
#include "ssd_cases.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

using test::SsdCase;
using test::SsdData;

// Everything one forward + backward produces, every buffer pre-filled with NaN to check that it is written.
template <class T>
struct SsdOut {
  std::vector<T> y, dx, ddt, dA, dB, dC;
  explicit SsdOut(const SsdCase& c) {
    const T nan = std::numeric_limits<T>::quiet_NaN();
    const size_t nx = (size_t)c.B * c.Tn * c.H * c.P, nt = (size_t)c.B * c.Tn * c.H,
                 nb = (size_t)c.B * c.Tn * c.G * c.N;
    y.assign(nx, nan);
    dx.assign(nx, nan);
    ddt.assign(nt, nan);
    dA.assign(c.H, nan);
    dB.assign(nb, nan);
    dC.assign(nb, nan);
  }
};

// The same inputs held in double (float values widened exactly), so naive in double is the reference for float.
SsdData<double> widen(const SsdCase& c, const SsdData<float>& f) {
  SsdData<double> d(c, 0);
  auto cp = [](const std::vector<float>& s, std::vector<double>& t) { std::copy(s.begin(), s.end(), t.begin()); };
  cp(f.x, d.x);
  cp(f.dt, d.dt);
  cp(f.A, d.A);
  cp(f.Bm, d.Bm);
  cp(f.Cm, d.Cm);
  cp(f.dy, d.dy);
  return d;
}

template <class T>
SsdOut<T> run_naive(const SsdCase& c, const SsdData<T>& d) {
  SsdOut<T> o(c);
  ssd_forward_naive(o.y.data(), d.x.data(), d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(), c.B, c.Tn, c.H, c.P, c.G,
                    c.N);
  ssd_backward_naive(o.dx.data(), o.ddt.data(), o.dA.data(), o.dB.data(), o.dC.data(), d.dy.data(), d.x.data(),
                     d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(), c.B, c.Tn, c.H, c.P, c.G, c.N);
  return o;
}

template <class T>
SsdOut<T> run_chunked(const SsdCase& c, const SsdData<T>& d) {
  SsdOut<T> o(c);
  std::vector<T> states(ssd_states_size(c.B, c.Tn, c.H, c.P, c.N, c.chunk), std::numeric_limits<T>::quiet_NaN());
  ssd_forward_chunked(o.y.data(), states.data(), d.x.data(), d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(), c.B,
                      c.Tn, c.H, c.P, c.G, c.N, c.chunk);
  ssd_backward_chunked(o.dx.data(), o.ddt.data(), o.dA.data(), o.dB.data(), o.dC.data(), d.dy.data(), states.data(),
                       d.x.data(), d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(), c.B, c.Tn, c.H, c.P, c.G, c.N,
                       c.chunk);
  return o;
}

// The GPU scan's algorithm on the host; scratch poisoned with NaN (a kernel reading what none wrote shows).
template <class T>
SsdOut<T> run_elements(const SsdCase& c, const SsdData<T>& d, std::vector<T>* states_out = nullptr) {
  SsdOut<T> o(c);
  std::vector<T> states(ssd_states_size(c.B, c.Tn, c.H, c.P, c.N, c.chunk), std::numeric_limits<T>::quiet_NaN());
  auto scratch_for = [&](bool backward) {
    const size_t bytes = ssd_element_scratch_bytes<T>(c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk, backward);
    return std::vector<double>(bytes / sizeof(double) + 1, std::numeric_limits<double>::quiet_NaN());
  };
  std::vector<double> fwd = scratch_for(false), bwd = scratch_for(true);
  ssd_forward_elements(HostLaunch{}, fwd.data(), o.y.data(), states.data(), d.x.data(), d.dt.data(), d.A.data(),
                       d.Bm.data(), d.Cm.data(), c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk);
  ssd_backward_elements(HostLaunch{}, bwd.data(), o.dx.data(), o.ddt.data(), o.dA.data(), o.dB.data(), o.dC.data(),
                        d.dy.data(), states.data(), d.x.data(), d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(), c.B,
                        c.Tn, c.H, c.P, c.G, c.N, c.chunk);
  if (states_out) *states_out = states;
  return o;
}

template <class T>
bool all_finite(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T e) { return std::isfinite(e); });
}

// Compares every output with tolerance |got − want| <= atol + rtol·|want|; atol is scaled by each tensor's
// largest magnitude, since sums of many signed terms can be small where their parts are not.
template <class T>
void expect_match(const SsdOut<T>& got, const SsdOut<double>& want, double rtol, double atol_rel, const char* what) {
  auto check = [&](const std::vector<T>& g, const std::vector<double>& w, const char* name) {
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    auto r = compare(g.data(), w.data(), g.size(), rtol, atol_rel * std::max(scale, 1e-30));
    EXPECT_TRUE(r.ok) << what << " " << name << " " << r.message;
    EXPECT_TRUE(all_finite(g)) << what << " " << name << " has non-finite values";
  };
  check(got.y, want.y, "y");
  check(got.dx, want.dx, "dx");
  check(got.ddt, want.ddt, "ddt");
  check(got.dA, want.dA, "dA");
  check(got.dB, want.dB, "dB");
  check(got.dC, want.dC, "dC");
}

// ---- naive against finite differences ----

void gradcheck_naive(int B, int Tn, int H, int P, int G, int N) {
  const size_t nx = (size_t)B * Tn * H * P, nt = (size_t)B * Tn * H, nb = (size_t)B * Tn * G * N;
  auto x = random_vector(nx, 11), dt = random_vector(nt, 12, 0.1, 1.0), A = random_vector(H, 13, -2.0, -0.3);
  auto Bm = random_vector(nb, 14), Cm = random_vector(nb, 15), r = random_vector(nx, 16);
  std::vector<double> y(nx);
  auto loss = [&] {
    ssd_forward_naive(y.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), B, Tn, H, P, G, N);
    return test::dot(y, r);
  };
  std::vector<double> dx(nx), ddt(nt), dA(H), dB(nb), dC(nb);
  ssd_backward_naive(dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(), r.data(), x.data(), dt.data(), A.data(),
                     Bm.data(), Cm.data(), B, Tn, H, P, G, N);
  const struct {
    std::vector<double>& in;
    const std::vector<double>& grad;
    const char* name;
  } checks[] = {{x, dx, "dx"}, {dt, ddt, "ddt"}, {A, dA, "dA"}, {Bm, dB, "dB"}, {Cm, dC, "dC"}};
  for (const auto& ch : checks) {
    auto g = test::gradcheck(loss, ch.in.data(), ch.in.size(), ch.grad.data());
    EXPECT_TRUE(g.ok) << ch.name << " (B " << B << " Tn " << Tn << " H " << H << " P " << P << " G " << G << " N " << N
                      << ") " << g.message;
  }
}

TEST(OpsSsd, GradcheckNaive) {
  gradcheck_naive(2, 5, 4, 3, 2, 2);  // grouped: two heads per group
  gradcheck_naive(1, 6, 2, 2, 1, 3);  // one group for all heads
  gradcheck_naive(2, 4, 2, 3, 2, 2);  // a group per head
  gradcheck_naive(1, 1, 2, 2, 1, 2);  // a single token
}

TEST(OpsSsd, HandComputedTwoTokens) {
  // one head, P = N = 1: y1 = dt1 x1 B1 C1; y2 = (exp(dt2 A) dt1 x1 B1 + dt2 x2 B2) C2
  const double x[2] = {1.5, -2}, dt[2] = {0.5, 0.25}, A[1] = {-2}, Bm[2] = {3, 0.5}, Cm[2] = {2, -1};
  double y[2];
  ssd_forward_naive(y, x, dt, A, Bm, Cm, 1, 2, 1, 1, 1, 1);
  const double h1 = 0.5 * 1.5 * 3, h2 = std::exp(0.25 * -2) * h1 + 0.25 * -2 * 0.5;
  EXPECT_DOUBLE_EQ(y[0], h1 * 2);
  EXPECT_DOUBLE_EQ(y[1], h2 * -1);
  double yc[2], states[2];
  ssd_forward_chunked(yc, states, x, dt, A, Bm, Cm, 1, 2, 1, 1, 1, 1, 1);
  EXPECT_NEAR(yc[0], y[0], 1e-14);
  EXPECT_NEAR(yc[1], y[1], 1e-14);
  EXPECT_EQ(states[0], 0.0);
  EXPECT_NEAR(states[1], h1, 1e-14);
}

// ---- chunked against naive ----

class OpsSsdChunkedVsNaive : public ::testing::TestWithParam<SsdCase> {};

TEST_P(OpsSsdChunkedVsNaive, MatchesInFloat) {
  const auto c = GetParam();
  SsdData<float> df(c, 100);
  SsdData<double> dd = widen(c, df);
  auto want = run_naive(c, dd);
  auto got = run_chunked(c, df);
  expect_match(got, want, 1e-5, 1e-6, "chunked float vs naive double");
  // the float naive is itself within the same tolerance (it only rounds inputs and outputs)
  expect_match(run_naive(c, df), want, 1e-5, 1e-6, "naive float vs naive double");
}

TEST_P(OpsSsdChunkedVsNaive, MatchesInDouble) {
  const auto c = GetParam();
  SsdData<double> d(c, 200);
  expect_match(run_chunked(c, d), run_naive(c, d), 1e-10, 1e-12, "chunked double vs naive double");
}

TEST_P(OpsSsdChunkedVsNaive, ElementKernelsMatchInFloatAndDouble) {
  const auto c = GetParam();
  SsdData<float> df(c, 100);
  expect_match(run_elements(c, df), run_naive(c, widen(c, df)), 1e-5, 1e-6, "elements float vs naive double");
  SsdData<double> d(c, 200);
  std::vector<double> states;
  expect_match(run_elements(c, d, &states), run_naive(c, d), 1e-10, 1e-12, "elements double vs naive double");
  std::vector<double> chunked_states(states.size());
  std::vector<double> y((size_t)c.B * c.Tn * c.H * c.P);
  ssd_forward_chunked(y.data(), chunked_states.data(), d.x.data(), d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(),
                      c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk);
  auto r = compare(states.data(), chunked_states.data(), states.size(), 1e-10, 1e-12);
  EXPECT_TRUE(r.ok) << "saved chunk-start states " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsSsdChunkedVsNaive,
                         ::testing::Values(
                             // T a multiple of the chunk, not a multiple, T < chunk, chunk 1, T = 1
                             SsdCase{2, 64, 4, 8, 1, 8, 16}, SsdCase{2, 37, 4, 8, 2, 8, 16},
                             SsdCase{2, 37, 4, 8, 4, 8, 8}, SsdCase{2, 10, 4, 8, 1, 8, 16},
                             SsdCase{1, 13, 2, 4, 1, 4, 1}, SsdCase{2, 1, 4, 8, 2, 8, 16},
                             SsdCase{1, 29, 4, 8, 2, 6, 7}, SsdCase{1, 40, 2, 8, 1, 8, 40},
                             // typical shapes: P = 32, N = 16 or 64, chunk 64, one group
                             SsdCase{2, 150, 4, 32, 1, 16, 64}, SsdCase{1, 130, 2, 32, 1, 64, 64},
                             // strongly decaying gates: cumulative log decay around −200 within a 16-token chunk
                             SsdCase{2, 50, 4, 8, 2, 8, 16, -16, -8, 0.5, 1.5},
                             // dt spanning decades: some steps almost keep the state, others almost erase it
                             SsdCase{2, 70, 4, 8, 1, 8, 32, -16, -1, 1e-3, 2.0}));

// The brief's extreme case: A = −16, dt ≈ 1, so a 64-token chunk decays by about −1000 in log space.
TEST(OpsSsd, StronglyDecayingGateIsFiniteAndMatchesNaive) {
  SsdCase c{2, 150, 4, 8, 2, 8, 64, -16, -16, 0.9, 1.1};
  SsdData<float> df(c, 300);
  for (float& a : df.A) a = -16;
  SsdData<double> dd = widen(c, df);
  double cs = 0;
  for (int t = 0; t < 64; t++) cs += dd.dt[(size_t)t * c.H] * dd.A[0];
  EXPECT_LT(cs, -900);
  auto want = run_naive(c, dd);
  auto got = run_chunked(c, df);
  expect_match(got, want, 1e-5, 1e-6, "strong decay float");
  expect_match(run_chunked(c, dd), want, 1e-10, 1e-12, "strong decay double");
}

// ---- step function ----

TEST(OpsSsd, StepMatchesNaiveForward) {
  SsdCase c{2, 23, 4, 8, 2, 8, 1};
  auto check = [&](auto tag) {
    using T = decltype(tag);
    SsdData<T> d(c, 400);
    const size_t nx = (size_t)c.B * c.Tn * c.H * c.P;
    std::vector<T> want(nx), got(nx, std::numeric_limits<T>::quiet_NaN());
    ssd_forward_naive(want.data(), d.x.data(), d.dt.data(), d.A.data(), d.Bm.data(), d.Cm.data(), c.B, c.Tn, c.H, c.P,
                      c.G, c.N);
    for (int b = 0; b < c.B; b++) {
      std::vector<T> state((size_t)c.H * c.P * c.N, T(0));
      for (int t = 0; t < c.Tn; t++) {
        const size_t bt = (size_t)b * c.Tn + t;
        ssd_step(got.data() + bt * c.H * c.P, state.data(), d.x.data() + bt * c.H * c.P, d.dt.data() + bt * c.H,
                 d.A.data(), d.Bm.data() + bt * c.G * c.N, d.Cm.data() + bt * c.G * c.N, c.H, c.P, c.G, c.N);
      }
    }
    return std::make_pair(got, want);
  };
  auto [gd, wd] = check(double{});
  EXPECT_EQ(gd, wd);  // the same code with a double state: the same bits
  auto [gf, wf] = check(float{});
  auto r = compare(gf.data(), wf.data(), gf.size(), 1e-5, 1e-5);  // float state rounds once per step
  EXPECT_TRUE(r.ok) << r.message;
}

// ---- determinism ----

TEST(OpsSsd, ChunkedDoesNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (int G : {1, 2, 4}) {
    SsdCase c{3, 100, 4, 16, G, 16, 32};
    SsdData<float> d(c, 500);
    omp_set_num_threads(1);
    auto one = run_chunked(c, d);
    omp_set_num_threads(2);
    auto two = run_chunked(c, d);
    EXPECT_EQ(one.y, two.y) << "G = " << G;
    EXPECT_EQ(one.dx, two.dx) << "G = " << G;
    EXPECT_EQ(one.ddt, two.ddt) << "G = " << G;
    EXPECT_EQ(one.dA, two.dA) << "G = " << G;
    EXPECT_EQ(one.dB, two.dB) << "G = " << G;
    EXPECT_EQ(one.dC, two.dC) << "G = " << G;
  }
  omp_set_num_threads(saved);
}

TEST(OpsSsd, ElementKernelsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  SsdCase c{3, 100, 4, 16, 2, 16, 32};
  SsdData<float> d(c, 600);
  omp_set_num_threads(1);
  auto one = run_elements(c, d);
  omp_set_num_threads(2);
  auto two = run_elements(c, d);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.y, two.y);
  EXPECT_EQ(one.dx, two.dx);
  EXPECT_EQ(one.ddt, two.ddt);
  EXPECT_EQ(one.dA, two.dA);
  EXPECT_EQ(one.dB, two.dB);
  EXPECT_EQ(one.dC, two.dC);
}

// Strong decay through the element kernels: exponents of −1000 underflow to 0, nothing turns non-finite.
TEST(OpsSsd, ElementKernelsStayFiniteUnderStrongDecay) {
  SsdCase c{2, 150, 4, 8, 2, 8, 64, -16, -16, 0.9, 1.1};
  SsdData<float> df(c, 300);
  for (float& a : df.A) a = -16;
  expect_match(run_elements(c, df), run_naive(c, widen(c, df)), 1e-5, 1e-6, "strong decay, elements float");
}

TEST(OpsSsd, RejectsBadShapes) {
  std::vector<float> v(64);
  EXPECT_THROW(ssd_forward_naive(v.data(), v.data(), v.data(), v.data(), v.data(), v.data(), 1, 1, 3, 1, 2, 1), Error);
  EXPECT_THROW(
      ssd_forward_chunked(v.data(), v.data(), v.data(), v.data(), v.data(), v.data(), v.data(), 1, 1, 2, 1, 1, 1, 0),
      Error);
}

}  // namespace
}  // namespace canonlab
