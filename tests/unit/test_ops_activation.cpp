// activations: values against double formulas (both below and above the threading threshold), finite
// differences for every backward, and the sign / straight-through estimator contract.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double relu2_ref(double x) { return x > 0 ? x * x : 0; }
double elu_ref(double x) { return x > 0 ? x : std::exp(x) - 1; }

using Fwd = void (*)(float*, const float*, size_t);

void check_values(Fwd f, double (*ref)(double), const char* name) {
  // 40000 elements crosses the threading threshold; 17 does not
  for (size_t n : {size_t(17), size_t(40000)}) {
    auto x = random_vector<float>(n, 1, -6, 6);
    std::vector<float> y(n);
    std::vector<double> want(n);
    f(y.data(), x.data(), n);
    for (size_t i = 0; i < n; i++) want[i] = ref(x[i]);
    auto c = compare(y.data(), want.data(), n, 2e-6, 1e-7);
    EXPECT_TRUE(c.ok) << name << " n=" << n << " " << c.message;
  }
}

TEST(OpsActivation, ForwardValues) {
  check_values(gelu_forward<float>, gelu_ref, "gelu");
  check_values(silu_forward<float>, silu_ref, "silu");
  check_values(relu2_forward<float>, relu2_ref, "relu2");
  check_values(elu_forward<float>, elu_ref, "elu");
}

using FwdD = void (*)(double*, const double*, size_t);
using BwdD = void (*)(double*, const double*, const double*, size_t);

void check_grad(FwdD f, BwdD b, const char* name, size_t n) {
  // keep clear of x = 0, where relu2's second derivative jumps and ELU's first does
  auto x = random_vector(n, 2, -4, 4);
  for (auto& v : x)
    if (std::abs(v) < 1e-3) v = 0.5;
  auto r = random_vector(n, 3);
  std::vector<double> y(n), dx(n);
  auto loss = [&] {
    f(y.data(), x.data(), n);
    return test::dot(y, r);
  };
  b(dx.data(), r.data(), x.data(), n);
  test::GradcheckOptions opt;
  opt.max_points = n > 1000 ? 16 : 0;  // the big case only has to reach the threaded loop
  auto g = test::gradcheck(loss, x.data(), n, dx.data(), opt);
  EXPECT_TRUE(g.ok) << name << " n=" << n << " " << g.message;
}

TEST(OpsActivation, BackwardsMatchFiniteDifferences) {
  for (size_t n : {size_t(64), size_t(40000)}) {
    check_grad(gelu_forward<double>, gelu_backward<double>, "gelu", n);
    check_grad(silu_forward<double>, silu_backward<double>, "silu", n);
    check_grad(relu2_forward<double>, relu2_backward<double>, "relu2", n);
    check_grad(elu_forward<double>, elu_backward<double>, "elu", n);
  }
}

TEST(OpsActivation, FiniteAndSaturatedAtExtremes) {
  const float x[4] = {-200.f, -88.f, 88.f, 200.f};
  const float dy[4] = {1, 1, 1, 1};
  float y[4], dx[4];
  using Bwd = void (*)(float*, const float*, const float*, size_t);
  for (auto [fwd, bwd] : {std::pair<Fwd, Bwd>{silu_forward<float>, silu_backward<float>},
                          std::pair<Fwd, Bwd>{gelu_forward<float>, gelu_backward<float>}}) {
    fwd(y, x, 4);
    bwd(dx, dy, x, 4);
    for (int i = 0; i < 4; i++) {
      EXPECT_TRUE(std::isfinite(y[i])) << x[i];
      EXPECT_TRUE(std::isfinite(dx[i])) << x[i];
    }
    EXPECT_NEAR(y[0], 0.f, 1e-30);
    EXPECT_FLOAT_EQ(y[3], 200.f);
    EXPECT_NEAR(dx[0], 0.f, 1e-30);
    EXPECT_FLOAT_EQ(dx[3], 1.f);
  }
}

TEST(OpsActivation, SwigluValuesAndGradient) {
  const int N = 5, Hd = 7;
  auto gu = random_vector((size_t)N * 2 * Hd, 4, -3, 3), r = random_vector((size_t)N * Hd, 5);
  std::vector<double> y((size_t)N * Hd);
  swiglu_forward(y.data(), gu.data(), N, Hd);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < Hd; i++)
      EXPECT_NEAR(y[n * Hd + i], silu_ref(gu[n * 2 * Hd + i]) * gu[n * 2 * Hd + Hd + i], 1e-14);
  auto loss = [&] {
    swiglu_forward(y.data(), gu.data(), N, Hd);
    return test::dot(y, r);
  };
  std::vector<double> dgu(gu.size());
  swiglu_backward(dgu.data(), r.data(), gu.data(), N, Hd);
  auto g = test::gradcheck(loss, gu.data(), gu.size(), dgu.data());
  EXPECT_TRUE(g.ok) << g.message;
}

TEST(OpsActivation, SignForward) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float x[8] = {0.f, -0.f, 1e-30f, -1e-30f, 3.f, -2.5f, std::numeric_limits<float>::infinity(), nan};
  float y[8];
  sign_forward(y, x, 8);
  EXPECT_EQ(y[0], 1.f);  // sign(0) = +1
  EXPECT_EQ(y[1], 1.f);  // and for −0
  EXPECT_EQ(y[2], 1.f);
  EXPECT_EQ(y[3], -1.f);
  EXPECT_EQ(y[4], 1.f);
  EXPECT_EQ(y[5], -1.f);
  EXPECT_EQ(y[6], 1.f);
  EXPECT_TRUE(std::isnan(y[7]));
  // the threaded path agrees
  auto big = random_vector<float>(40000, 6);
  big[123] = 0.f;
  std::vector<float> yb(big.size());
  sign_forward(yb.data(), big.data(), big.size());
  for (size_t i = 0; i < big.size(); i++) ASSERT_EQ(yb[i], big[i] >= 0 ? 1.f : -1.f);
}

TEST(OpsActivation, SignSteBackward) {
  const float x[6] = {0.f, 0.5f, -1.f, 1.f, 1.0001f, -7.f};
  const float dy[6] = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  float dx[6];
  sign_ste_backward(dx, dy, x, 6, false);
  for (int i = 0; i < 6; i++) EXPECT_EQ(dx[i], dy[i]) << "identity at " << i;
  sign_ste_backward(dx, dy, x, 6, true);
  const float want[6] = {1.f, 2.f, 3.f, 4.f, 0.f, 0.f};  // |x| = 1 still passes; |x| > 1 is cut
  for (int i = 0; i < 6; i++) EXPECT_EQ(dx[i], want[i]) << "clipped at " << i;
}

}  // namespace
}  // namespace canonlab
