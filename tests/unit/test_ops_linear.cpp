// linear: fast (BLAS) against the naive loops in float, finite differences in double for both.
#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "engine/ops/linear/fast.h"
#include "engine/ops/linear/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct LinearShape {
  int N, IN, OUT, ldx_pad, ldy_pad;
  bool bias;
};
std::ostream& operator<<(std::ostream& os, const LinearShape& c) {
  return os << "N=" << c.N << " IN=" << c.IN << " OUT=" << c.OUT << " ldx_pad=" << c.ldx_pad << " ldy_pad=" << c.ldy_pad
            << " bias=" << c.bias;
}

class OpsLinearFastVsNaive : public ::testing::TestWithParam<LinearShape> {};

TEST_P(OpsLinearFastVsNaive, ForwardAndBackwardMatchInFloat) {
  const auto s = GetParam();
  const int ldx = s.IN + s.ldx_pad, ldy = s.OUT + s.ldy_pad;
  auto x = random_vector<float>((size_t)s.N * ldx, 1);
  auto w = random_vector<float>((size_t)s.OUT * s.IN, 2);
  auto b = random_vector<float>(s.OUT, 3);
  const float* bp = s.bias ? b.data() : nullptr;
  // Padding columns of y must survive: they belong to whoever else shares the buffer.
  std::vector<float> y_fast((size_t)s.N * ldy, 7.f), y_naive((size_t)s.N * ldy, 7.f);
  linear_forward(y_fast.data(), ldy, x.data(), ldx, w.data(), bp, s.N, s.IN, s.OUT);
  linear_forward_naive(y_naive.data(), ldy, x.data(), ldx, w.data(), bp, s.N, s.IN, s.OUT);
  auto c = compare(y_fast.data(), y_naive.data(), y_fast.size(), 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "y: " << c.message;
  for (int n = 0; n < s.N; n++)
    for (int o = s.OUT; o < ldy; o++) ASSERT_EQ(y_fast[(size_t)n * ldy + o], 7.f);

  // dx rows of stride ldx (reusing x's padding), dw/db accumulate onto non-zero values
  auto dy = random_vector<float>((size_t)s.N * ldy, 4);
  std::vector<float> dx_fast((size_t)s.N * ldx, 7.f), dx_naive((size_t)s.N * ldx, 7.f);
  auto dw_fast = random_vector<float>((size_t)s.OUT * s.IN, 5), dw_naive = dw_fast;
  auto db_fast = random_vector<float>(s.OUT, 6), db_naive = db_fast;
  float* dbf = s.bias ? db_fast.data() : nullptr;
  float* dbn = s.bias ? db_naive.data() : nullptr;
  linear_backward(dx_fast.data(), ldx, dw_fast.data(), dbf, dy.data(), ldy, x.data(), ldx, w.data(), s.N, s.IN, s.OUT);
  linear_backward_naive(dx_naive.data(), ldx, dw_naive.data(), dbn, dy.data(), ldy, x.data(), ldx, w.data(), s.N, s.IN,
                        s.OUT);
  c = compare(dx_fast.data(), dx_naive.data(), dx_fast.size(), 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "dx: " << c.message;
  c = compare(dw_fast.data(), dw_naive.data(), dw_fast.size(), 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "dw: " << c.message;
  c = compare(db_fast.data(), db_naive.data(), db_fast.size(), 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "db: " << c.message;
  for (int n = 0; n < s.N; n++)
    for (int i = s.IN; i < ldx; i++) ASSERT_EQ(dx_fast[(size_t)n * ldx + i], 7.f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsLinearFastVsNaive,
                         ::testing::Values(LinearShape{1, 1, 1, 0, 0, true}, LinearShape{37, 19, 23, 0, 0, true},
                                           LinearShape{37, 19, 23, 5, 3, false},
                                           LinearShape{130, 64, 96, 128, 32, true},
                                           LinearShape{67, 128, 384, 0, 0, true}));

TEST(OpsLinear, BackwardSkipsNullDxAndDbAndAccumulatesDw) {
  const int N = 9, IN = 5, OUT = 4;
  auto x = random_vector<float>(N * IN, 1), w = random_vector<float>(OUT * IN, 2),
       dy = random_vector<float>(N * OUT, 3);
  std::vector<float> dw_once(OUT * IN, 0.f), dw_twice(OUT * IN, 0.f);
  linear_backward<float>(nullptr, IN, dw_once.data(), nullptr, dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
  linear_backward<float>(nullptr, IN, dw_twice.data(), nullptr, dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
  linear_backward<float>(nullptr, IN, dw_twice.data(), nullptr, dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
  for (int i = 0; i < OUT * IN; i++) EXPECT_FLOAT_EQ(dw_twice[i], 2 * dw_once[i]);
}

// loss = Σ y ⊙ r over x, w and b, checked against finite differences for both implementations.
template <bool Fast>
void gradcheck_linear() {
  const int N = 6, IN = 5, OUT = 7, ldx = 8, ldy = 9;
  auto x = random_vector((size_t)N * ldx, 11), w = random_vector((size_t)OUT * IN, 12), b = random_vector(OUT, 13);
  auto r = random_vector((size_t)N * ldy, 14);
  std::vector<double> y((size_t)N * ldy, 0.0);
  auto forward = [&] {
    if (Fast)
      linear_forward(y.data(), ldy, x.data(), ldx, w.data(), b.data(), N, IN, OUT);
    else
      linear_forward_naive(y.data(), ldy, x.data(), ldx, w.data(), b.data(), N, IN, OUT);
  };
  auto loss = [&] {
    forward();
    double l = 0;
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OUT; o++) l += y[(size_t)n * ldy + o] * r[(size_t)n * ldy + o];
    return l;
  };
  std::vector<double> dx((size_t)N * ldx, 0.0), dw((size_t)OUT * IN, 0.0), db(OUT, 0.0);
  if (Fast)
    linear_backward(dx.data(), ldx, dw.data(), db.data(), r.data(), ldy, x.data(), ldx, w.data(), N, IN, OUT);
  else
    linear_backward_naive(dx.data(), ldx, dw.data(), db.data(), r.data(), ldy, x.data(), ldx, w.data(), N, IN, OUT);
  // x's padding columns are not inputs; their "gradient" is whatever dx holds there, and the loss ignores them,
  // so only real columns are compared.
  for (int n = 0; n < N; n++)
    for (int i = IN; i < ldx; i++) dx[(size_t)n * ldx + i] = 0;
  auto g = test::gradcheck(loss, x.data(), x.size(), dx.data());
  EXPECT_TRUE(g.ok) << "dx " << g.message;
  g = test::gradcheck(loss, w.data(), w.size(), dw.data());
  EXPECT_TRUE(g.ok) << "dw " << g.message;
  g = test::gradcheck(loss, b.data(), b.size(), db.data());
  EXPECT_TRUE(g.ok) << "db " << g.message;
}

TEST(OpsLinear, GradcheckNaive) { gradcheck_linear<false>(); }
TEST(OpsLinear, GradcheckFast) { gradcheck_linear<true>(); }

}  // namespace
}  // namespace canonlab
