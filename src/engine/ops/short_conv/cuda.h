#pragma once
// The short convolution's bias and activation stage on the GPU: short_conv.h's contracts with a leading stream and
// device pointers (the depthwise conv itself is canon_conv/cuda.h with groups = channels). The algorithm is
// element_kernels.h's (checked on the host against short_conv.h); the bias gradient sums 64 fixed row blocks in
// order, so the bits repeat.
#include <cstddef>

#include "engine/cuda/types.h"
#include "engine/ops/element_kernels.h"

namespace canonlab::cuda {

// pre: (N, C), bias added in place when bias is non-null; y: (N, C) rows of stride ldy = silu(pre) or pre
void short_conv_bias_act_forward(CudaStream stream, float* y, int ldy, float* pre, const float* bias, int N, int C,
                                 bool silu);
// dpre: (N, C) written = dy ⊙ silu'(pre), or dy; dy: rows of stride lddy
void short_conv_act_backward(CudaStream stream, float* dpre, const float* dy, int lddy, const float* pre, int N, int C,
                             bool silu);
// Doubles of scratch short_conv_bias_backward needs.
inline size_t short_conv_bias_backward_scratch_size(int C) { return size_t(kRowBlocks) * C; }
// db: (C) += Σ_rows dpre
void short_conv_bias_backward(CudaStream stream, float* db, const float* dpre, int N, int C, double* scratch);

}  // namespace canonlab::cuda
