// The linear layer on cuBLASLt against naive.h: fp32 (true fp32, so the reduction tolerance), bf16 inputs against
// the same reference on bf16-rounded inputs (only fp32 accumulation differs) and against fp32 (what bf16 costs);
// strided rows (q|k|v column blocks) with the pad columns left alone; dw/db accumulate; bit-identical reruns.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

#include "engine/cuda/gemm.h"
#include "engine/ops/elementwise/cuda.h"
#include "engine/ops/linear/cuda.h"
#include "engine/ops/linear/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct LinearCase {
  int N, IN, OUT, pad;  // x rows have stride IN + pad, y and dy rows OUT + pad, dx rows IN + pad
  bool bias;
};
std::ostream& operator<<(std::ostream& os, const LinearCase& c) {
  return os << "N=" << c.N << " IN=" << c.IN << " OUT=" << c.OUT << " pad=" << c.pad << " bias=" << c.bias;
}

class GpuLinear : public GpuTestWithParam<LinearCase> {};

TEST_P(GpuLinear, Fp32MatchesNaive) {
  const auto p = GetParam();
  const int ldx = p.IN + p.pad, ldy = p.OUT + p.pad;
  const auto x = random_vector<float>(size_t(p.N) * ldx, 1), w = random_vector<float>(size_t(p.OUT) * p.IN, 2);
  const auto b = random_vector<float>(p.OUT, 3), dy = random_vector<float>(size_t(p.N) * ldy, 4);
  const auto dw0 = random_vector<float>(w.size(), 5), db0 = random_vector<float>(p.OUT, 6);
  const float* bp = p.bias ? b.data() : nullptr;
  // sentinels in the pad columns must survive
  std::vector<float> y(size_t(p.N) * ldy, 7.f), dx(size_t(p.N) * ldx, 7.f), dw = dw0, db = db0;
  linear_forward_naive(y.data(), ldy, x.data(), ldx, w.data(), bp, p.N, p.IN, p.OUT);
  linear_backward_naive(dx.data(), ldx, dw.data(), p.bias ? db.data() : nullptr, dy.data(), ldy, x.data(), ldx,
                        w.data(), p.N, p.IN, p.OUT);

  cuda::Gemm gemm(stream());
  const auto x_d = to_device(x), w_d = to_device(w), b_d = to_device(b), dy_d = to_device(dy);
  std::vector<std::vector<float>> ys, dxs, dws, dbs;
  for (int rep = 0; rep < 2; rep++) {
    auto y_d = to_device(std::vector<float>(y.size(), 7.f)), dx_d = to_device(std::vector<float>(dx.size(), 7.f));
    auto dw_d = to_device(dw0), db_d = to_device(db0);
    cuda::linear_forward(gemm, y_d.data(), ldy, x_d.data(), ldx, w_d.data(), p.bias ? b_d.data() : nullptr, p.N, p.IN,
                         p.OUT);
    cuda::linear_backward(gemm, dx_d.data(), ldx, dw_d.data(), p.bias ? db_d.data() : nullptr, dy_d.data(), ldy,
                          x_d.data(), ldx, w_d.data(), p.N, p.IN, p.OUT);
    sync();
    ys.push_back(y_d.download());
    dxs.push_back(dx_d.download());
    dws.push_back(dw_d.download());
    dbs.push_back(db_d.download());
  }
  // reduction lengths: IN for y, OUT for dx, N for dw and db
  auto r = compare_with(ys[0], y, reduction_over(p.IN));
  EXPECT_TRUE(r.ok) << "y " << r.message;
  r = compare_with(dxs[0], dx, reduction_over(p.OUT));
  EXPECT_TRUE(r.ok) << "dx " << r.message;
  r = compare_with(dws[0], dw, reduction_over(p.N));
  EXPECT_TRUE(r.ok) << "dw " << r.message;
  r = compare_with(dbs[0], db, reduction_over(p.N));
  EXPECT_TRUE(r.ok) << "db " << r.message;
  for (auto* v : {&ys, &dxs, &dws, &dbs}) EXPECT_TRUE(bit_equal((*v)[0], (*v)[1])) << "rerun differs";
  EXPECT_GE(gemm.algorithms_cached(), 2u);
}

TEST_P(GpuLinear, Bf16MatchesNaiveOnRoundedInputs) {
  const auto p = GetParam();
  const int ldx = p.IN + p.pad, ldy = p.OUT + p.pad;
  const auto x = random_vector<float>(size_t(p.N) * ldx, 11), w = random_vector<float>(size_t(p.OUT) * p.IN, 12);
  const auto b = random_vector<float>(p.OUT, 13), dy = random_vector<float>(size_t(p.N) * ldy, 14);
  const auto dw0 = random_vector<float>(w.size(), 15);
  const float* bp = p.bias ? b.data() : nullptr;
  const auto xr = rounded_bf16(x), wr = rounded_bf16(w), dyr = rounded_bf16(dy);
  // the reference on the rounded inputs (what the tensor cores multiply) and on the unrounded ones
  std::vector<float> y(size_t(p.N) * ldy, 7.f), dx(size_t(p.N) * ldx, 7.f), dw = dw0;
  std::vector<float> y32 = y, dx32 = dx, dw32 = dw0;
  linear_forward_naive(y.data(), ldy, xr.data(), ldx, wr.data(), bp, p.N, p.IN, p.OUT);
  linear_backward_naive(dx.data(), ldx, dw.data(), static_cast<float*>(nullptr), dyr.data(), ldy, xr.data(), ldx,
                        wr.data(), p.N, p.IN, p.OUT);
  linear_forward_naive(y32.data(), ldy, x.data(), ldx, w.data(), bp, p.N, p.IN, p.OUT);
  linear_backward_naive(dx32.data(), ldx, dw32.data(), static_cast<float*>(nullptr), dy.data(), ldy, x.data(), ldx,
                        w.data(), p.N, p.IN, p.OUT);

  cuda::Gemm gemm(stream());
  // the conversions the backend does: whole buffers, and a strided column block for x
  const auto x_d = to_device(x), w_d = to_device(w), b_d = to_device(b), dy_d = to_device(dy);
  cuda::DeviceBuffer<cuda::Bf16> x16(x.size()), w16(w.size()), dy16(dy.size());
  cuda::convert_columns_to_bf16(stream(), x16.data(), ldx, x_d.data(), ldx, p.N, p.IN);
  cuda::convert_to_bf16(stream(), w16.data(), w_d.data(), w.size());
  cuda::convert_to_bf16(stream(), dy16.data(), dy_d.data(), dy.size());
  std::vector<std::vector<float>> ys, dxs, dws;
  for (int rep = 0; rep < 2; rep++) {
    auto y_d = to_device(std::vector<float>(y.size(), 7.f)), dx_d = to_device(std::vector<float>(dx.size(), 7.f));
    auto dw_d = to_device(dw0);
    cuda::linear_forward_bf16(gemm, y_d.data(), ldy, x16.data(), ldx, w16.data(), p.bias ? b_d.data() : nullptr, p.N,
                              p.IN, p.OUT);
    cuda::linear_backward_bf16(gemm, dx_d.data(), ldx, dw_d.data(), dy16.data(), ldy, x16.data(), ldx, w16.data(), p.N,
                               p.IN, p.OUT);
    sync();
    ys.push_back(y_d.download());
    dxs.push_back(dx_d.download());
    dws.push_back(dw_d.download());
  }
  const auto exact_over = [](int K) {
    return Tolerance{kBf16Exact.rtol, kBf16Exact.atol * (K > 256 ? double(K) / 256.0 : 1.0)};
  };
  auto r = compare_with(ys[0], y, exact_over(p.IN));
  EXPECT_TRUE(r.ok) << "y vs rounded-input reference " << r.message;
  r = compare_with(dxs[0], dx, exact_over(p.OUT));
  EXPECT_TRUE(r.ok) << "dx vs rounded-input reference " << r.message;
  r = compare_with(dws[0], dw, exact_over(p.N));
  EXPECT_TRUE(r.ok) << "dw vs rounded-input reference " << r.message;
  // Against fp32 the error is a sum of K per-product roundings: inputs in U(-1, 1) give products of rms 1/3 with
  // relative rounding of std ~1.6e-3 (2^-9 per bf16 input), so the sum's error has std ~5e-4 sqrt(K); 4e-3 sqrt(K)
  // is about 8 standard deviations, for the largest reduction length of the three products.
  const double K = double(std::max({p.IN, p.OUT, p.N}));
  const Tolerance loose{kBf16VsFp32.rtol, 4e-3 * std::sqrt(K)};
  r = compare_with(ys[0], y32, loose);
  EXPECT_TRUE(r.ok) << "y vs fp32 " << r.message;
  r = compare_with(dxs[0], dx32, loose);
  EXPECT_TRUE(r.ok) << "dx vs fp32 " << r.message;
  for (auto* v : {&ys, &dxs, &dws}) EXPECT_TRUE(bit_equal((*v)[0], (*v)[1])) << "rerun differs";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuLinear,
                         ::testing::Values(LinearCase{1, 1, 1, 0, true}, LinearCase{7, 33, 17, 0, true},
                                           LinearCase{13, 64, 96, 3, false}, LinearCase{147, 128, 384, 0, false},
                                           LinearCase{147, 128, 128, 256, true}, LinearCase{1000, 129, 65, 1, true},
                                           LinearCase{3136, 128, 512, 0, true}, LinearCase{2049, 768, 768, 0, false}));

class GpuLinearSkip : public GpuTest {};

// dx may be skipped (the first layer's input needs no gradient).
TEST_F(GpuLinearSkip, NullDxIsSkipped) {
  const int N = 19, IN = 23, OUT = 29;
  const auto x = random_vector<float>(size_t(N) * IN, 21), w = random_vector<float>(size_t(OUT) * IN, 22);
  const auto dy = random_vector<float>(size_t(N) * OUT, 23);
  std::vector<float> dw(w.size(), 0.f);
  linear_backward_naive(static_cast<float*>(nullptr), IN, dw.data(), static_cast<float*>(nullptr), dy.data(), OUT,
                        x.data(), IN, w.data(), N, IN, OUT);
  cuda::Gemm gemm(stream());
  const auto x_d = to_device(x), w_d = to_device(w), dy_d = to_device(dy);
  auto dw_d = to_device(std::vector<float>(w.size(), 0.f));
  cuda::linear_backward(gemm, nullptr, IN, dw_d.data(), nullptr, dy_d.data(), OUT, x_d.data(), IN, w_d.data(), N, IN,
                        OUT);
  sync();
  const auto r = compare_with(dw_d.download(), dw, kReduction);
  EXPECT_TRUE(r.ok) << r.message;
}

}  // namespace
}  // namespace canonlab::test
