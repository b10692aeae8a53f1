// Grouped-query attention's head repetition on the GPU (engine/ops/repeat_heads/cuda.h) against the CPU op (the same
// element kernels on the host): strided rows, outputs poisoned first (so a column written outside its range shows),
// the backward run twice to compare bit for bit.
#include <vector>

#include "engine/ops/repeat_heads/cuda.h"
#include "engine/ops/repeat_heads/repeat_heads.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

class GpuRepeatHeads : public GpuTest {};

TEST_F(GpuRepeatHeads, MatchesTheCpuBitForBit) {
  // k | v of 2 key/value heads each (4 heads of 16), repeated 3 times, in a (N, 3C) buffer as the attention layer's
  const int N = 111, heads = 4, group = 3, D = 16, C = heads / 2 * group * D, ldx = C + heads * D, ldy = 3 * C;
  const auto x = random_vector<float>(size_t(N) * ldx, 1), dy = random_vector<float>(size_t(N) * ldy, 2);
  std::vector<float> y(size_t(N) * ldy, 0.0f), dx(size_t(N) * ldx, 0.0f);
  repeat_heads_forward(y.data() + C, ldy, x.data() + C, ldx, N, heads, group, D);
  repeat_heads_backward(dx.data() + C, ldx, dy.data() + C, ldy, N, heads, group, D);

  const auto x_d = to_device(x), dy_d = to_device(dy);
  auto y_d = poisoned(size_t(N) * ldy);
  cuda::repeat_heads_forward(stream(), y_d.data() + C, ldy, x_d.data() + C, ldx, N, heads, group, D);
  std::vector<std::vector<float>> dxs;
  for (int rep = 0; rep < 2; rep++) {
    auto dx_d = poisoned(size_t(N) * ldx);
    cuda::repeat_heads_backward(stream(), dx_d.data() + C, ldx, dy_d.data() + C, ldy, N, heads, group, D);
    sync();
    dxs.push_back(dx_d.download());
  }
  const auto y_got = y_d.download();
  std::vector<float> yw, yg, dxw, dxg;
  for (int r = 0; r < N; r++) {
    for (int c = C; c < ldy; c++) yw.push_back(y[size_t(r) * ldy + c]), yg.push_back(y_got[size_t(r) * ldy + c]);
    for (int c = C; c < ldx; c++) dxw.push_back(dx[size_t(r) * ldx + c]), dxg.push_back(dxs[0][size_t(r) * ldx + c]);
  }
  EXPECT_TRUE(bit_equal(yg, yw)) << "a copy: the same bits";
  EXPECT_TRUE(bit_equal(dxg, dxw)) << "the sum in double in group order: the CPU's bits";
  EXPECT_TRUE(bit_equal(dxs[0], dxs[1])) << "dx differs between two identical launches";
}

}  // namespace
}  // namespace canonlab::test
