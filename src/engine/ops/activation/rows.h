#pragma once
// Sign and its straight-through gradient over a column block of each row (sign-STE attention applies them to
// the q|k columns of the q|k|v buffer). Rows are independent, so one row per thread changes no bit.
#include <cstddef>

#include "engine/ops/activation/activation.h"

namespace canonlab {

// y[n, 0..width) = sign(x[n, 0..width)); x: (N, >= width) rows of stride ldx, y: rows of stride ldy
template <class T>
void sign_forward_rows(T* y, int ldy, const T* x, int ldx, int N, int width) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) sign_forward(y + size_t(n) * ldy, x + size_t(n) * ldx, size_t(width));
}

// dx[n, 0..width) = STE(dy, x) of sign_ste_backward; dx may alias dy (same stride).
template <class T>
void sign_ste_backward_rows(T* dx, int lddx, const T* dy, int lddy, const T* x, int ldx, int N, int width,
                            bool clipped) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    sign_ste_backward(dx + size_t(n) * lddx, dy + size_t(n) * lddy, x + size_t(n) * ldx, size_t(width), clipped);
}

}  // namespace canonlab
