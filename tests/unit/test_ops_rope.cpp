// rope: against an independent complex-number formulation, backward = inverse = transpose, and strides /
// rope_dim < D leave everything else alone.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <ostream>
#include <vector>

#include "engine/ops/rope/rope.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct RopeCase {
  int B, Tn, H, D, rope_dim, pad;
};
std::ostream& operator<<(std::ostream& os, const RopeCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " D=" << c.D << " rope_dim=" << c.rope_dim
            << " pad=" << c.pad;
}

class OpsRopeShapes : public ::testing::TestWithParam<RopeCase> {};

// Rotate-half as complex multiplication: z_i = x[i] + i·x[i + r/2] times e^{i t θ_i}.
std::vector<double> rope_reference(const std::vector<double>& x, const RopeCase& p, double base) {
  const int ld = p.H * p.D + p.pad, half = p.rope_dim / 2;
  std::vector<double> y = x;
  for (int b = 0; b < p.B; b++)
    for (int t = 0; t < p.Tn; t++)
      for (int h = 0; h < p.H; h++)
        for (int i = 0; i < half; i++) {
          size_t at = ((size_t)b * p.Tn + t) * ld + (size_t)h * p.D + i;
          std::complex<double> z(x[at], x[at + half]);
          z *= std::polar(1.0, t * std::pow(base, -2.0 * i / p.rope_dim));
          y[at] = z.real();
          y[at + half] = z.imag();
        }
  return y;
}

TEST_P(OpsRopeShapes, ForwardMatchesComplexRotationAndBackwardInverts) {
  const auto p = GetParam();
  const int ld = p.H * p.D + p.pad;
  const size_t n = (size_t)p.B * p.Tn * ld;
  auto x = random_vector(n, 1);
  auto want = rope_reference(x, p, 10000.0);
  std::vector<float> xf(x.begin(), x.end());
  rope_forward(xf.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  // float cos/sin of exact angles: a few ulp per output
  auto c = compare(xf.data(), want.data(), n, 1e-6, 1e-6);
  EXPECT_TRUE(c.ok) << "float forward " << c.message;
  std::vector<double> xd = x;
  rope_forward(xd.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  c = compare(xd.data(), want.data(), n, 1e-13, 1e-13);
  EXPECT_TRUE(c.ok) << "double forward " << c.message;
  // Untouched: dims >= rope_dim of each head and padding columns, bit for bit.
  for (size_t row = 0; row < (size_t)p.B * p.Tn; row++)
    for (int col = 0; col < ld; col++) {
      bool rotated = col < p.H * p.D && col % p.D < p.rope_dim;
      if (!rotated) {
        ASSERT_EQ(xd[row * ld + col], x[row * ld + col]) << "row " << row << " col " << col;
      }
    }
  rope_backward(xd.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  c = compare(xd.data(), x.data(), n, 1e-13, 1e-13);
  EXPECT_TRUE(c.ok) << "backward(forward(x)) " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsRopeShapes,
                         ::testing::Values(RopeCase{1, 1, 1, 2, 2, 0}, RopeCase{2, 37, 3, 16, 16, 0},
                                           RopeCase{2, 37, 3, 16, 8, 0}, RopeCase{3, 19, 2, 12, 4, 5},
                                           RopeCase{1, 70, 2, 96, 80, 7}, RopeCase{2, 5, 2, 8, 0, 3}));

TEST(OpsRope, PositionZeroIsIdentityAndRotationPreservesNorm) {
  const int B = 1, Tn = 3, H = 1, D = 8;
  auto x = random_vector(Tn * D, 3);
  auto y = x;
  rope_forward(y.data(), D, B, Tn, H, D, D, 10000.0);
  for (int d = 0; d < D; d++) EXPECT_EQ(y[d], x[d]);
  for (int t = 0; t < Tn; t++) {
    double nx = 0, ny = 0;
    for (int d = 0; d < D; d++) {
      nx += x[t * D + d] * x[t * D + d];
      ny += y[t * D + d] * y[t * D + d];
    }
    EXPECT_NEAR(nx, ny, 1e-12);
  }
  // t = 1, i = 0: angle exactly 1 rad
  EXPECT_NEAR(y[D + 0], x[D + 0] * std::cos(1.0) - x[D + 4] * std::sin(1.0), 1e-15);
  EXPECT_NEAR(y[D + 4], x[D + 4] * std::cos(1.0) + x[D + 0] * std::sin(1.0), 1e-15);
}

TEST(OpsRope, BackwardIsTheGradientOfForward) {
  const RopeCase p{2, 9, 2, 8, 6, 3};
  const int ld = p.H * p.D + p.pad;
  const size_t n = (size_t)p.B * p.Tn * ld;
  auto x = random_vector(n, 4), r = random_vector(n, 5);
  std::vector<double> y(n);
  auto loss = [&] {
    y = x;
    rope_forward(y.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 500.0);
    return test::dot(y, r);
  };
  auto dx = r;
  rope_backward(dx.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 500.0);
  auto g = test::gradcheck(loss, x.data(), n, dx.data());
  EXPECT_TRUE(g.ok) << g.message;
}

TEST(OpsRope, RejectsOddRopeDim) {
  std::vector<float> x(8);
  EXPECT_THROW(rope_forward(x.data(), 8, 1, 1, 1, 8, 3, 10000.0), Error);
}

}  // namespace
}  // namespace canonlab
