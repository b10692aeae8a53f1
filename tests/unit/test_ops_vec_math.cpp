// vec_math: the vectorisable exp/erfc against libm in double, and the lane reductions against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops/vec_math.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

TEST(OpsVecMath, ExpWithinAnUlpOnItsRange) {
  double worst = 0;
  for (int i = 0; i <= 200000; i++) {
    const float x = -87.0f + 175.0f * float(i) / 200000.0f;
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(double(vec_exp(x)) - want) / want);
  }
  EXPECT_LT(worst, 1.2e-7);
  EXPECT_EQ(vec_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(vec_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isfinite(vec_exp(1000.0f)));
  EXPECT_LT(vec_exp(-1000.0f), 1e-37f);
  EXPECT_EQ(vec_exp(0.5), std::exp(0.5));  // double goes to libm
}

TEST(OpsVecMath, ErfcRelativeErrorWhereNormal) {
  double worst = 0;
  for (int i = 0; i <= 200000; i++) {
    const float x = -9.0f + 18.0f * float(i) / 200000.0f;
    const double want = std::erfc(double(x));
    worst = std::max(worst, std::abs(double(vec_erfc(x)) - want) / want);
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(vec_erfc(0.3), std::erfc(0.3));
}

// GELU's backward takes Φ and φ from one call; Φ must be the forward's bits, φ within 3e-7·(1 + x²/2) of
// e^(−x²/2)/√(2π) relatively.
TEST(OpsVecMath, NormalCdfAndPdfTogether) {
  double worst_pdf = 0;
  for (int i = 0; i <= 200000; i++) {
    const float x = -12.0f + 24.0f * float(i) / 200000.0f;
    float cdf, pdf;
    vec_normal_cdf_pdf(x, cdf, pdf);
    EXPECT_EQ(cdf, 0.5f * vec_erfc(-x * 0.70710678118654752440f)) << x;
    const double want = std::exp(-0.5 * double(x) * double(x)) / std::sqrt(2 * M_PI);
    // the exponent x²/2 is formed from the rounded x/√2, so the error grows with it (as in any float e^(−x²/2))
    const double bound = 3e-7 * (1 + 0.5 * double(x) * double(x));
    if (want > 1e-37) worst_pdf = std::max(worst_pdf, std::abs(double(pdf) - want) / want / bound);
  }
  EXPECT_LT(worst_pdf, 1.0);
}

// The same bits in a vectorised loop and in a scalar call (what a loop's tail or a one-element row runs): the
// polynomials' fused multiply-adds are explicit, so no vector width contracts differently.
__attribute__((noinline)) float scalar_exp(float x) { return vec_exp(x); }
__attribute__((noinline)) float scalar_erfc(float x) { return vec_erfc(x); }
TEST(OpsVecMath, VectorLanesAndScalarCallsAgreeBitForBit) {
  const int n = 100003;
  std::vector<float> x(n), e(n), c(n);
  for (int i = 0; i < n; i++) x[i] = -90.0f + 180.0f * float(i) / float(n);
  for (int i = 0; i < n; i++) e[i] = vec_exp(x[i]);
  for (int i = 0; i < n; i++) c[i] = vec_erfc(x[i] * 0.1f);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(e[i], scalar_exp(x[i])) << x[i];
    ASSERT_EQ(c[i], scalar_erfc(x[i] * 0.1f)) << x[i];
  }
}

TEST(OpsVecMath, ReductionsMatchPlainLoops) {
  for (int n : {1, 7, 16, 17, 255, 256, 257, 1000}) {
    auto x = test::random_vector<float>(n, 1, -3, 3), y = test::random_vector<float>(n, 2);
    double sum = 0, dot = 0, sum_exp = 0;
    float mx = x[0];
    for (int i = 0; i < n; i++) {
      sum += x[i];
      dot += double(x[i]) * y[i];
      mx = std::max(mx, x[i]);
    }
    for (int i = 0; i < n; i++) sum_exp += std::exp(double(x[i]) - mx);
    EXPECT_NEAR(vec_sum(x.data(), n), sum, 1e-5 * n) << n;
    EXPECT_NEAR(vec_dot(x.data(), y.data(), n), dot, 1e-5 * n) << n;
    EXPECT_EQ(vec_max(x.data(), n), mx) << n;
    EXPECT_NEAR(vec_dot_wide(x.data(), y.data(), n), dot, 1e-12 * n) << n;
    std::vector<float> w = test::random_vector<float>(n, 3);
    double scaled = 0;
    for (int i = 0; i < n; i++) scaled += double(x[i] * w[i]) * double(y[i]);
    EXPECT_NEAR(vec_lane_sum<double>(n, [&](int i) { return double(x[i] * w[i]) * double(y[i]); }), scaled, 1e-12 * n) << n;
    EXPECT_NEAR(vec_sum_exp(x.data(), n, mx), sum_exp, 1e-6 * sum_exp) << n;
  }
}

}  // namespace
}  // namespace canonlab
