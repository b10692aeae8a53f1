// Dynamic Canon's per-position kernel term on the GPU (engine/ops/dynamic_conv/cuda.cu) against naive.h, forward
// and backward: T < K, odd channel counts, several sequences; out and din accumulate onto what they held, ddelta is
// written everywhere (it starts poisoned). The CPU fast path sums the taps in the same order, so it gives the same
// bits; a zero delta adds exactly nothing.
#include <ostream>
#include <vector>

#include "engine/ops/dynamic_conv/cuda.h"
#include "engine/ops/dynamic_conv/fast.h"
#include "engine/ops/dynamic_conv/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct DynCase {
  int B, Tn, C, K;
};
std::ostream& operator<<(std::ostream& os, const DynCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K;
}

class GpuDynamicConv : public GpuTestWithParam<DynCase> {};

TEST_P(GpuDynamicConv, MatchesTheCpuReference) {
  const DynCase p = GetParam();
  const size_t n = size_t(p.B) * p.Tn * p.C, nd = n * p.K;
  const auto in = random_vector<float>(n, 1), delta = random_vector<float>(nd, 2), dout = random_vector<float>(n, 3);
  const auto out0 = random_vector<float>(n, 4), din0 = random_vector<float>(n, 5);
  auto out_ref = out0, din_ref = din0, out_fast = out0, din_fast = din0;
  std::vector<float> dd_ref(nd), dd_fast(nd);
  dynamic_conv_forward_naive(out_ref.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  dynamic_conv_backward_naive(din_ref.data(), dd_ref.data(), dout.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  dynamic_conv_forward(out_fast.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  dynamic_conv_backward(din_fast.data(), dd_fast.data(), dout.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);

  const auto in_d = to_device(in), delta_d = to_device(delta), dout_d = to_device(dout);
  auto out_d = to_device(out0), din_d = to_device(din0);
  auto dd_d = poisoned(nd);
  cuda::dynamic_conv_forward(stream(), out_d.data(), in_d.data(), delta_d.data(), p.B, p.Tn, p.C, p.K);
  cuda::dynamic_conv_backward(stream(), din_d.data(), dd_d.data(), dout_d.data(), in_d.data(), delta_d.data(), p.B,
                              p.Tn, p.C, p.K);
  sync();
  auto c = compare_with(out_d.download(), out_ref, kReduction);
  EXPECT_TRUE(c.ok) << p << " out " << c.message;
  c = compare_with(din_d.download(), din_ref, kReduction);
  EXPECT_TRUE(c.ok) << p << " din " << c.message;
  c = compare_with(dd_d.download(), dd_ref, kElementwise);
  EXPECT_TRUE(c.ok) << p << " ddelta " << c.message;
  EXPECT_TRUE(bit_equal(dd_d.download(), dd_fast)) << p << " ddelta vs fast.h";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuDynamicConv,
                         ::testing::Values(DynCase{2, 37, 16, 4}, DynCase{3, 70, 80, 4}, DynCase{2, 3, 7, 4},
                                           DynCase{3, 1, 5, 3}, DynCase{2, 9, 13, 1}, DynCase{1, 130, 24, 9}));

TEST_F(GpuTest, DynamicConvZeroDeltaAddsExactlyNothing) {
  const int B = 2, Tn = 11, C = 70, K = 4;
  const size_t n = size_t(B) * Tn * C;
  const auto in = random_vector<float>(n, 1), before = random_vector<float>(n, 2);
  const auto in_d = to_device(in), delta_d = to_device(std::vector<float>(n * K, 0.f));
  auto out_d = to_device(before);
  cuda::dynamic_conv_forward(stream(), out_d.data(), in_d.data(), delta_d.data(), B, Tn, C, K);
  sync();
  EXPECT_TRUE(bit_equal(out_d.download(), before));
}

}  // namespace
}  // namespace canonlab::test
