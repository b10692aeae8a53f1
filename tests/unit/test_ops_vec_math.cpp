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
    EXPECT_NEAR(vec_sum_exp(x.data(), n, mx), sum_exp, 1e-6 * sum_exp) << n;
  }
}

}  // namespace
}  // namespace canonlab
