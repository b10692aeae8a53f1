#pragma once
// The token shift on the GPU: token_shift.h's contracts with a leading stream and device pointers. The algorithm is
// element_kernels.h's (the CPU runs the same kernels on the host); the coefficient gradients sum 64 fixed row blocks
// in order, so the bits repeat.
#include <cstddef>

#include "engine/cuda/types.h"
#include "engine/ops/token_shift/element_kernels.h"

namespace canonlab::cuda {

// x, y: (B, Tn, H, D) token rows of stride ldx, ldy; coef: the kind's coefficients (nullptr for replace, partial)
void token_shift_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, const float* coef,
                         TokenShift shift, int B, int Tn, int H, int D);
// Doubles of scratch token_shift_backward needs.
inline size_t token_shift_backward_scratch_size(TokenShift shift, int H) {
  return ::canonlab::token_shift_backward_scratch_size(shift.kind, H);
}
// dx written (rows of stride lddx); dcoef accumulated (nullptr for the fixed kinds)
void token_shift_backward(CudaStream stream, float* dx, int lddx, float* dcoef, const float* dy, int lddy,
                          const float* x, int ldx, const float* coef, TokenShift shift, int B, int Tn, int H, int D,
                          double* scratch);

}  // namespace canonlab::cuda
