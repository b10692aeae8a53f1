#pragma once
// Rotary position embedding on the GPU, in place: rope.h's rope_forward / rope_backward with a leading stream,
// device pointers. Angles are formed in double and rounded to float as cos/sin, as on the CPU.
#include "engine/cuda/types.h"

namespace canonlab::cuda {

// x: (B, Tn, H, D) token rows of stride ld, rotated in place on the first rope_dim dims of each head:
// for i < r/2, theta = t · base^(-2i/r), (x[i], x[i+r/2]) <- (x[i] cos - x[i+r/2] sin, x[i+r/2] cos + x[i] sin)
void rope_forward(CudaStream stream, float* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base);
// the transpose (rotation by -theta), in place on dx
void rope_backward(CudaStream stream, float* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base);

}  // namespace canonlab::cuda
