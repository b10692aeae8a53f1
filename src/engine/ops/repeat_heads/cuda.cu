#include "engine/ops/repeat_heads/cuda.h"

#include "engine/cuda/launch.cuh"

namespace canonlab::cuda {

void repeat_heads_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, int N, int heads, int group,
                          int D) {
  check_repeat_heads(heads, group, D);
  repeat_heads_forward_elements(DeviceLaunch{stream}, y, ldy, x, ldx, N, heads, group, D);
}

void repeat_heads_backward(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, int N, int heads,
                           int group, int D) {
  check_repeat_heads(heads, group, D);
  repeat_heads_backward_elements(DeviceLaunch{stream}, dx, lddx, dy, lddy, N, heads, group, D);
}

}  // namespace canonlab::cuda
