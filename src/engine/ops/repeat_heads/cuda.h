#pragma once
// Grouped-query attention's head repetition on the GPU: repeat_heads.h's contracts with a leading stream and device
// pointers. The algorithm is element_kernels.h's (the CPU runs the same kernels on the host).
#include "engine/cuda/types.h"
#include "engine/ops/repeat_heads/element_kernels.h"

namespace canonlab::cuda {

// x: (N, heads·D) rows of stride ldx; y: (N, heads·group·D) rows of stride ldy
void repeat_heads_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, int N, int heads, int group,
                          int D);
// dx: (N, heads·D) written, the sum over each head's group in order
void repeat_heads_backward(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, int N, int heads,
                           int group, int D);

}  // namespace canonlab::cuda
