#pragma once
// Dynamic Canon's per-position kernel term on the GPU: fast.h's ops with a leading stream and device pointers.
// One thread per output element, each summing its own K taps in ascending order: no atomics, no cross-thread
// reduction, so the result does not depend on the launch shape.
#include "engine/cuda/types.h"

namespace canonlab::cuda {

// out, in: (B, Tn, C); delta: (B, Tn, C, K)
// out[b, t, c] += Σ_{i < K, t−(K−1)+i >= 0} delta[b, t, c, i] · in[b, t − (K−1) + i, c]
void dynamic_conv_forward(CudaStream stream, float* out, const float* in, const float* delta, int B, int Tn, int C,
                          int K);
// din: (B, Tn, C) accumulated; ddelta: (B, Tn, C, K) written
//   din[b, s, c]       += Σ_{i, t = s+(K−1)−i < Tn} delta[b, t, c, i] · dout[b, t, c]
//   ddelta[b, t, c, i]  = dout[b, t, c] · in[b, t − (K−1) + i, c]   (0 where that time is before 0)
void dynamic_conv_backward(CudaStream stream, float* din, float* ddelta, const float* dout, const float* in,
                           const float* delta, int B, int Tn, int C, int K);

}  // namespace canonlab::cuda
