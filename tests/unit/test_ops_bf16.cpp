// bf16 GEMMs (engine/ops/linear/bf16.h): the rounding against hand-worked bit patterns, the GEMM and the linear
// layer against the naive reference (inputs rounded to bf16, double sums), over transposes, strides, odd sizes,
// alpha and beta; and a check that the rounding really happens (a bf16 GEMM is not an fp32 one).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops/linear/bf16.h"
#include "engine/ops/linear/fast.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(OpsBf16, RoundsToNearestEvenAndKeepsSpecialValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)), 0x3f80);
  // 1 + 3 * 2^-8 is half-way between 1 + 2^-7 (odd) and 1 + 2^-6: ties go up to the even one.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // just above half-way rounds up
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)), 0x3f80);  // just below rounds down
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to infinity, as hardware does
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));  // a NaN whose payload would round to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000u)), 0x0001);  // denormals keep their upper bits
  for (float x : {0.1f, 3.14159f, -1e-20f, 65504.f}) EXPECT_EQ(round_to_bf16(round_to_bf16(x)), round_to_bf16(x)) << x;
}

struct GemmCase {
  bool ta, tb;
  int M, N, K, pad;
  float alpha, beta;
};

class OpsBf16Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(OpsBf16Gemm, MatchesTheNaiveReference) {
  const GemmCase c = GetParam();
  const int a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const auto A = random_vector<float>(size_t(a_rows) * lda, 1), B = random_vector<float>(size_t(b_rows) * ldb, 2);
  auto C = random_vector<float>(size_t(c.M) * ldc, 3), C_ref = C;
  Bf16Gemm g;
  g.gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
  gemm_bf16_naive(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C_ref.data(), ldc);
  // Both sum exact bf16 products; they differ only in fp32 vs double accumulation.
  const auto r = compare(C.data(), C_ref.data(), C.size(), 2e-5 * std::sqrt(double(c.K)), 1e-5);
  EXPECT_TRUE(r.ok) << bf16_path_name(g.path()) << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsBf16Gemm,
                         ::testing::Values(GemmCase{false, true, 49, 384, 128, 0, 1.f, 0.f},
                                           GemmCase{false, false, 37, 53, 19, 3, 1.f, 1.f},
                                           GemmCase{true, false, 64, 96, 255, 0, 1.f, 1.f},
                                           GemmCase{true, true, 5, 7, 11, 1, 0.5f, 0.25f},
                                           GemmCase{false, true, 1, 1, 1, 0, 1.f, 0.f}));

TEST(OpsBf16, LinearLayerMatchesTheReferenceAndDiffersFromFp32) {
  const int N = 45, IN = 70, OUT = 33, ldx = IN + 2, ldy = OUT + 5;
  const auto x = random_vector<float>(size_t(N) * ldx, 4), w = random_vector<float>(size_t(OUT) * IN, 5);
  const auto b = random_vector<float>(OUT, 6), dy = random_vector<float>(size_t(N) * ldy, 7);
  Bf16Gemm g;
  std::vector<float> y(size_t(N) * ldy, 9.f), y_ref(y), y_fp32(y);
  linear_forward_bf16(g, y.data(), ldy, x.data(), ldx, w.data(), b.data(), N, IN, OUT);
  // Reference: y = b + round(x) round(w)^T.
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OUT; o++) y_ref[size_t(n) * ldy + o] = b[size_t(o)];
  gemm_bf16_naive(false, true, N, OUT, IN, 1.f, x.data(), ldx, w.data(), IN, 1.f, y_ref.data(), ldy);
  auto r = compare(y.data(), y_ref.data(), y.size(), 2e-4, 1e-5);
  EXPECT_TRUE(r.ok) << "y: " << r.message;
  for (int n = 0; n < N; n++)
    for (int o = OUT; o < ldy; o++) ASSERT_EQ(y[size_t(n) * ldy + o], 9.f) << "padding of y was written";
  linear_forward(y_fp32.data(), ldy, x.data(), ldx, w.data(), b.data(), N, IN, OUT);
  double largest_difference = 0;
  for (size_t i = 0; i < y.size(); i++) largest_difference = std::max(largest_difference, double(std::fabs(y[i] - y_fp32[i])));
  EXPECT_GT(largest_difference, 1e-4) << "bf16 results equal fp32 ones: the inputs were not rounded";

  std::vector<float> dx(size_t(N) * ldx, 0.f), dx_ref(dx);
  auto dw = random_vector<float>(size_t(OUT) * IN, 8), dw_ref = dw;
  auto db = random_vector<float>(OUT, 9), db_ref = db;
  linear_backward_bf16(g, dx.data(), ldx, dw.data(), db.data(), dy.data(), ldy, x.data(), ldx, w.data(), N, IN, OUT);
  gemm_bf16_naive(false, false, N, IN, OUT, 1.f, dy.data(), ldy, w.data(), IN, 0.f, dx_ref.data(), ldx);
  gemm_bf16_naive(true, false, OUT, IN, N, 1.f, dy.data(), ldy, x.data(), ldx, 1.f, dw_ref.data(), IN);
  for (int o = 0; o < OUT; o++) {
    double s = 0;
    for (int n = 0; n < N; n++) s += dy[size_t(n) * ldy + o];
    db_ref[size_t(o)] += float(s);
  }
  r = compare(dx.data(), dx_ref.data(), dx.size(), 2e-4, 1e-5);
  EXPECT_TRUE(r.ok) << "dx: " << r.message;
  r = compare(dw.data(), dw_ref.data(), dw.size(), 2e-4, 1e-5);
  EXPECT_TRUE(r.ok) << "dw: " << r.message;
  r = compare(db.data(), db_ref.data(), db.size(), 1e-6, 1e-6);  // the bias gradient stays fp32
  EXPECT_TRUE(r.ok) << "db: " << r.message;
}

TEST(OpsBf16, RepeatedCallsAreBitIdentical) {
  const int M = 33, N = 65, K = 129;
  const auto A = random_vector<float>(size_t(M) * K, 10), B = random_vector<float>(size_t(K) * N, 11);
  std::vector<float> C1(size_t(M) * N), C2(C1.size());
  Bf16Gemm g;
  g.gemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C1.data(), N);
  g.gemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C2.data(), N);
  EXPECT_EQ(C1, C2);
}

TEST(OpsBf16, ReportsWhichPathThisMachineTakes) {
  // Native only where oneDNN runs bf16 in hardware (AVX512-BF16 or AMX); elsewhere the emulated path runs.
  std::cout << "bf16 GEMM path on this machine: " << bf16_path_description() << "\n";
  if (bf16_gemm_path() == Bf16Path::emulated)
    GTEST_SKIP() << "no AVX512-BF16 or AMX on this CPU: the native path is untested here";
  EXPECT_NE(bf16_matmul_impl().find("brg"), std::string::npos)
      << "oneDNN picked " << bf16_matmul_impl() << " for a dense bf16 matmul, not its brgemm kernels";
  Bf16Gemm g;
  EXPECT_EQ(g.path(), Bf16Path::native);
}

}  // namespace
}  // namespace canonlab
