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
  for (int n = 0; n < N; n++) {
    // the element loop inline: a nested parallel region per row (even a disabled one) costs libgomp a team start
    // and a futex wake, about 50,000 per E1-Bk0 step
    T* yr = y + size_t(n) * ldy;
    const T* xr = x + size_t(n) * ldx;
    for (int i = 0; i < width; i++) yr[i] = sign_value(xr[i]);
  }
}

// dx[n, 0..width) = STE(dy, x) of sign_ste_backward; dx may alias dy (same stride).
template <class T>
void sign_ste_backward_rows(T* dx, int lddx, const T* dy, int lddy, const T* x, int ldx, int N, int width,
                            bool clipped) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T* dxr = dx + size_t(n) * lddx;
    const T* dyr = dy + size_t(n) * lddy;
    const T* xr = x + size_t(n) * ldx;
    if (clipped)
      for (int i = 0; i < width; i++) dxr[i] = clipped_ste_value(dyr[i], xr[i]);
    else if (dxr != dyr)
      for (int i = 0; i < width; i++) dxr[i] = dyr[i];
  }
}

}  // namespace canonlab
