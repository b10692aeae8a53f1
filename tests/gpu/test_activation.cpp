// Activations and the elementwise helpers on the GPU against the CPU ops (activation.h and the module code they
// replace), over sizes that are not multiples of the block size; sign, STE and the key shift bit for bit.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/activation/cuda.h"
#include "engine/ops/elementwise/cuda.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

// Values spanning the interesting ranges: around 0, the GELU/SiLU knees, ELU's exp region, and large |x|.
std::vector<float> activation_inputs(size_t n, unsigned seed) {
  std::vector<float> x = random_vector<float>(n, seed, -6, 6);
  const float specials[] = {0.f, -0.f, 1.f, -1.f, 1e-7f, -1e-7f, 20.f, -20.f, 90.f, -90.f};
  for (size_t i = 0; i < n && i < std::size(specials); i++) x[i] = specials[i];
  return x;
}

using Forward = void (*)(cuda::CudaStream, float*, const float*, size_t);
using Backward = void (*)(cuda::CudaStream, float*, const float*, const float*, size_t);
struct ActCase {
  std::string name;
  Forward gpu_fwd;
  Backward gpu_bwd;
  void (*cpu_fwd)(float*, const float*, size_t);
  void (*cpu_bwd)(float*, const float*, const float*, size_t);
};

class GpuActivation : public GpuTestWithParam<size_t> {};

TEST_P(GpuActivation, ForwardAndBackwardMatchCpu) {
  const size_t n = GetParam();
  const std::vector<ActCase> cases = {
      {"gelu", cuda::gelu_forward, cuda::gelu_backward, gelu_forward<float>, gelu_backward<float>},
      {"silu", cuda::silu_forward, cuda::silu_backward, silu_forward<float>, silu_backward<float>},
      {"relu2", cuda::relu2_forward, cuda::relu2_backward, relu2_forward<float>, relu2_backward<float>},
      {"elu", cuda::elu_forward, cuda::elu_backward, elu_forward<float>, elu_backward<float>},
  };
  const auto x = activation_inputs(n, 1), dy = random_vector<float>(n, 2);
  const auto dx_d = to_device(x), dy_d = to_device(dy);
  for (const ActCase& c : cases) {
    std::vector<float> y(n), dx(n);
    c.cpu_fwd(y.data(), x.data(), n);
    c.cpu_bwd(dx.data(), dy.data(), x.data(), n);
    auto y_d = poisoned(n), dxg_d = poisoned(n);
    c.gpu_fwd(stream(), y_d.data(), dx_d.data(), n);
    c.gpu_bwd(stream(), dxg_d.data(), dy_d.data(), dx_d.data(), n);
    sync();
    auto r = compare_with(y_d.download(), y, kElementwise);
    EXPECT_TRUE(r.ok) << c.name << " forward: " << r.message;
    r = compare_with(dxg_d.download(), dx, kElementwise);
    EXPECT_TRUE(r.ok) << c.name << " backward: " << r.message;
  }
}

TEST_P(GpuActivation, SwigluMatchesCpu) {
  const int Hd = int(GetParam() % 97) + 1, N = int(GetParam() / 97) + 1;
  const auto gu = activation_inputs(size_t(N) * 2 * Hd, 3), dy = random_vector<float>(size_t(N) * Hd, 4);
  std::vector<float> y(size_t(N) * Hd), dgu(gu.size());
  swiglu_forward(y.data(), gu.data(), N, Hd);
  swiglu_backward(dgu.data(), dy.data(), gu.data(), N, Hd);
  const auto gu_d = to_device(gu), dy_d = to_device(dy);
  auto y_d = poisoned(y.size()), dgu_d = poisoned(dgu.size());
  cuda::swiglu_forward(stream(), y_d.data(), gu_d.data(), N, Hd);
  cuda::swiglu_backward(stream(), dgu_d.data(), dy_d.data(), gu_d.data(), N, Hd);
  sync();
  auto r = compare_with(y_d.download(), y, kElementwise);
  EXPECT_TRUE(r.ok) << "swiglu forward: " << r.message;
  r = compare_with(dgu_d.download(), dgu, kElementwise);
  EXPECT_TRUE(r.ok) << "swiglu backward: " << r.message;
}

TEST_P(GpuActivation, SignAndStraightThroughAreExact) {
  const size_t n = GetParam();
  auto x = activation_inputs(n, 5);
  if (n > 12) x[11] = std::numeric_limits<float>::quiet_NaN();
  const auto dy = random_vector<float>(n, 6);
  std::vector<float> y(n), dx_plain(n), dx_clip(n);
  sign_forward(y.data(), x.data(), n);
  sign_ste_backward(dx_plain.data(), dy.data(), x.data(), n, false);
  sign_ste_backward(dx_clip.data(), dy.data(), x.data(), n, true);
  const auto x_d = to_device(x), dy_d = to_device(dy);
  auto y_d = poisoned(n), a_d = poisoned(n), b_d = poisoned(n);
  cuda::sign_forward(stream(), y_d.data(), x_d.data(), n);
  cuda::sign_ste_backward(stream(), a_d.data(), dy_d.data(), x_d.data(), n, false);
  cuda::sign_ste_backward(stream(), b_d.data(), dy_d.data(), x_d.data(), n, true);
  sync();
  EXPECT_TRUE(bit_equal(y_d.download(), y)) << "sign";
  EXPECT_TRUE(bit_equal(a_d.download(), dx_plain)) << "ste";
  EXPECT_TRUE(bit_equal(b_d.download(), dx_clip)) << "ste clipped";
}

INSTANTIATE_TEST_SUITE_P(Sizes, GpuActivation, ::testing::Values(size_t(1), size_t(31), size_t(257), size_t(4099),
                                                                 size_t(100003)));

class GpuElementwise : public GpuTest {};

// The strided forms on the q|k columns of a fused (rows, 3C + pad) buffer, v left as it was.
TEST_F(GpuElementwise, SignColumnsTouchOnlyTheirColumns) {
  const int rows = 37, C = 24, ld = 3 * C + 5;
  auto x = activation_inputs(size_t(rows) * ld, 7);
  const auto dy = random_vector<float>(x.size(), 8);
  std::vector<float> y = x, dx = dy;
  for (int r = 0; r < rows; r++) {
    sign_forward(y.data() + size_t(r) * ld, x.data() + size_t(r) * ld, size_t(2 * C));
    sign_ste_backward(dx.data() + size_t(r) * ld, dy.data() + size_t(r) * ld, x.data() + size_t(r) * ld,
                      size_t(2 * C), true);
  }
  const auto x_d = to_device(x);
  auto y_d = to_device(x), dx_d = to_device(dy);
  cuda::sign_forward_columns(stream(), y_d.data(), ld, x_d.data(), ld, rows, 2 * C);
  cuda::sign_ste_backward_columns(stream(), dx_d.data(), ld, dx_d.data(), ld, x_d.data(), ld, rows, 2 * C, true);
  sync();
  EXPECT_TRUE(bit_equal(y_d.download(), y));
  EXPECT_TRUE(bit_equal(dx_d.download(), dx));
}

// Key shift, residual adds, copies and bf16 conversion against the loops they replace.
TEST_F(GpuElementwise, ElementwiseHelpersMatchTheirLoops) {
  const int B = 3, Tn = 19, C = 13;
  const size_t n = size_t(B) * Tn * C;
  const auto x = random_vector<float>(n, 9), d = random_vector<float>(n, 10);
  const auto x_d = to_device(x), d_d = to_device(d);
  for (int offset : {1, 2, 5, Tn, Tn + 3}) {
    std::vector<float> xs(n), dx = d;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tn; t++)
        for (int c = 0; c < C; c++) {
          const size_t i = (size_t(b) * Tn + t) * C + c;
          xs[i] = t >= offset ? x[i] + x[i - size_t(offset) * C] : x[i];
          dx[i] += x[i];
          if (t + offset < Tn) dx[i] += x[i + size_t(offset) * C];
        }
    auto xs_d = poisoned(n), dx_d = to_device(d);
    cuda::shift_add(stream(), xs_d.data(), x_d.data(), B, Tn, C, offset);
    cuda::shift_add_backward(stream(), dx_d.data(), x_d.data(), B, Tn, C, offset);
    sync();
    EXPECT_TRUE(bit_equal(xs_d.download(), xs)) << "shift_add offset " << offset;
    EXPECT_TRUE(bit_equal(dx_d.download(), dx)) << "shift_add_backward offset " << offset;
  }
  std::vector<float> sum(n), scaled(n);
  for (size_t i = 0; i < n; i++) {
    sum[i] = x[i] + d[i];
    scaled[i] = 0.37f * x[i];
  }
  auto out_d = poisoned(n), acc_d = to_device(x), sc_d = poisoned(n), cp_d = poisoned(n), z_d = poisoned(n);
  cuda::add(stream(), out_d.data(), x_d.data(), d_d.data(), n);
  cuda::add_into(stream(), acc_d.data(), d_d.data(), n);
  cuda::scale(stream(), sc_d.data(), x_d.data(), 0.37f, n);
  cuda::copy(stream(), cp_d.data(), x_d.data(), n);
  cuda::fill_zero(stream(), z_d.data(), n);
  sync();
  EXPECT_TRUE(bit_equal(out_d.download(), sum));
  EXPECT_TRUE(bit_equal(acc_d.download(), sum));
  EXPECT_TRUE(bit_equal(sc_d.download(), scaled));
  EXPECT_TRUE(bit_equal(cp_d.download(), x));
  EXPECT_TRUE(bit_equal(z_d.download(), std::vector<float>(n, 0.f)));

  // columns [3, 3 + 7) of a (B·Tn, C) buffer into a (B·Tn, 9) one at column 1, then accumulated back
  const int rows = B * Tn, cols = 7, ld_dst = 9;
  std::vector<float> blk(size_t(rows) * ld_dst, 0.f), back = x;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      blk[size_t(r) * ld_dst + 1 + c] = x[size_t(r) * C + 3 + c];
      back[size_t(r) * C + 3 + c] += x[size_t(r) * C + 3 + c];
    }
  auto blk_d = to_device(std::vector<float>(blk.size(), 0.f)), back_d = to_device(x);
  cuda::copy_columns(stream(), blk_d.data() + 1, ld_dst, x_d.data() + 3, C, rows, cols);
  cuda::add_columns(stream(), back_d.data() + 3, C, blk_d.data() + 1, ld_dst, rows, cols);
  sync();
  EXPECT_TRUE(bit_equal(blk_d.download(), blk));
  EXPECT_TRUE(bit_equal(back_d.download(), back));

  // bf16 round trip: round to nearest even, as the host reference does
  cuda::DeviceBuffer<cuda::Bf16> h_d(n);
  auto rt_d = poisoned(n);
  cuda::convert_to_bf16(stream(), h_d.data(), x_d.data(), n);
  cuda::convert_from_bf16(stream(), rt_d.data(), h_d.data(), n);
  sync();
  EXPECT_TRUE(bit_equal(rt_d.download(), rounded_bf16(x)));
}

TEST_F(GpuElementwise, CountNonFiniteCountsNanAndInf) {
  std::vector<float> x = random_vector<float>(70001, 11);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[70000] = std::numeric_limits<float>::infinity();
  x[31337] = -std::numeric_limits<float>::infinity();
  const auto x_d = to_device(x);
  cuda::DeviceBuffer<int> count(1);
  cuda::count_non_finite(stream(), count.data(), x_d.data(), x.size());
  sync();
  EXPECT_EQ(count.download()[0], 3);
  cuda::count_non_finite(stream(), count.data(), x_d.data(), 5);
  sync();
  EXPECT_EQ(count.download()[0], 0);
}

}  // namespace
}  // namespace canonlab::test
