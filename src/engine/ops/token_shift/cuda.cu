#include "engine/ops/token_shift/cuda.h"

#include "engine/cuda/launch.cuh"

namespace canonlab::cuda {

void token_shift_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, const float* coef,
                         TokenShift shift, int B, int Tn, int H, int D) {
  check_token_shift(shift, D);
  token_shift_forward_elements(DeviceLaunch{stream}, y, ldy, x, ldx, coef, shift, B, Tn, H, D);
}

void token_shift_backward(CudaStream stream, float* dx, int lddx, float* dcoef, const float* dy, int lddy,
                          const float* x, int ldx, const float* coef, TokenShift shift, int B, int Tn, int H, int D,
                          double* scratch) {
  check_token_shift(shift, D);
  token_shift_backward_elements(DeviceLaunch{stream}, dx, lddx, dcoef, dy, lddy, x, ldx, coef, shift, B, Tn, H, D,
                                scratch);
}

}  // namespace canonlab::cuda
