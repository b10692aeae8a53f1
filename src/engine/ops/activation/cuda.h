#pragma once
// Elementwise activations on the GPU: the CPU ops of activation.h with a leading stream, device pointers.
// GELU is the exact erf form (erfc, as on the CPU), not the tanh approximation.
#include <cstddef>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

// y, x: (n); backward: dx = dy · f'(x)
void gelu_forward(CudaStream stream, float* y, const float* x, size_t n);
void gelu_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void silu_forward(CudaStream stream, float* y, const float* x, size_t n);
void silu_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void relu2_forward(CudaStream stream, float* y, const float* x, size_t n);
void relu2_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void elu_forward(CudaStream stream, float* y, const float* x, size_t n);
void elu_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);

// gate_up: (N, 2·Hd) = [gate | up]; y: (N, Hd) = silu(gate) ⊙ up; dgate_up: (N, 2·Hd) written
void swiglu_forward(CudaStream stream, float* y, const float* gate_up, int N, int Hd);
void swiglu_backward(CudaStream stream, float* dgate_up, const float* dy, const float* gate_up, int N, int Hd);

// y = +1 for x >= 0 (also −0), −1 for x < 0, NaN stays NaN
void sign_forward(CudaStream stream, float* y, const float* x, size_t n);
// straight-through: dx = dy, or with clipped, 0 where |x| > 1 (dx may alias dy)
void sign_ste_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n, bool clipped);

// The same two on (rows, cols) blocks with row strides: sign-STE attention applies them to the q|k columns of
// the fused (rows, 3C) buffer and leaves v alone.
void sign_forward_columns(CudaStream stream, float* y, int ldy, const float* x, int ldx, int rows, int cols);
void sign_ste_backward_columns(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, const float* x,
                               int ldx, int rows, int cols, bool clipped);

}  // namespace canonlab::cuda
