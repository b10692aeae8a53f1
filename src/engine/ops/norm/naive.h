#pragma once
// Reference RMSNorm and LayerNorm over the last dimension. Plain loops, one thread, double accumulators.
// w == nullptr means no learnable scale (and b == nullptr no bias); dw/db are then ignored.
#include <cmath>
#include <cstddef>

namespace canonlab {

// y, x: (N, C); rstd: (N) saved for backward; w: (C) or nullptr
template <class T>
void rmsnorm_forward_naive(T* y, T* rstd, const T* x, const T* w, int N, int C, T eps) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (size_t)n * C;
    double ss = 0;
    for (int c = 0; c < C; c++) ss += double(xn[c]) * double(xn[c]);
    double r = 1.0 / std::sqrt(ss / C + double(eps));
    for (int c = 0; c < C; c++) y[(size_t)n * C + c] = T(double(xn[c]) * r * (w ? double(w[c]) : 1.0));
    rstd[n] = T(r);
  }
}

// dx: (N, C) written; dw: (C) accumulated when w and dw are non-null
template <class T>
void rmsnorm_backward_naive(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (size_t)n * C;
    const T* dyn = dy + (size_t)n * C;
    double r = rstd[n];
    // y = w ⊙ x r with r = (mean(x²) + eps)^(-1/2), so dr/dx = -r³ x / C:
    // dx = r (g - x r² mean(g ⊙ x)), g = w ⊙ dy
    double gx = 0;
    for (int c = 0; c < C; c++) gx += double(dyn[c]) * (w ? double(w[c]) : 1.0) * double(xn[c]);
    gx /= C;
    for (int c = 0; c < C; c++) {
      double g = double(dyn[c]) * (w ? double(w[c]) : 1.0);
      dx[(size_t)n * C + c] = T(r * (g - double(xn[c]) * r * r * gx));
    }
  }
  if (w && dw) {
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int n = 0; n < N; n++) acc += double(dy[(size_t)n * C + c]) * double(x[(size_t)n * C + c]) * double(rstd[n]);
      dw[c] += T(acc);
    }
  }
}

// y, x: (N, C); mean, rstd: (N) saved for backward; w, b: (C) or nullptr
template <class T>
void layernorm_forward_naive(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C, T eps) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (size_t)n * C;
    double m = 0;
    for (int c = 0; c < C; c++) m += double(xn[c]);
    m /= C;
    double var = 0;
    for (int c = 0; c < C; c++) var += (double(xn[c]) - m) * (double(xn[c]) - m);
    var /= C;
    double r = 1.0 / std::sqrt(var + double(eps));
    for (int c = 0; c < C; c++)
      y[(size_t)n * C + c] = T((double(xn[c]) - m) * r * (w ? double(w[c]) : 1.0) + (b ? double(b[c]) : 0.0));
    mean[n] = T(m);
    rstd[n] = T(r);
  }
}

// dx: (N, C) written; dw: (C) accumulated when w and dw are non-null; db: (C) accumulated when non-null
template <class T>
void layernorm_backward_naive(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                              int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (size_t)n * C;
    const T* dyn = dy + (size_t)n * C;
    double m = mean[n], r = rstd[n];
    // dx = r (g - mean(g) - xhat mean(g ⊙ xhat)), g = w ⊙ dy, xhat = (x - mean) r
    double gm = 0, gxm = 0;
    for (int c = 0; c < C; c++) {
      double g = double(dyn[c]) * (w ? double(w[c]) : 1.0);
      gm += g;
      gxm += g * (double(xn[c]) - m) * r;
    }
    gm /= C;
    gxm /= C;
    for (int c = 0; c < C; c++) {
      double g = double(dyn[c]) * (w ? double(w[c]) : 1.0);
      double xhat = (double(xn[c]) - m) * r;
      dx[(size_t)n * C + c] = T(r * (g - gm - xhat * gxm));
    }
  }
  if (w && dw) {
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int n = 0; n < N; n++)
        acc += double(dy[(size_t)n * C + c]) * (double(x[(size_t)n * C + c]) - double(mean[n])) * double(rstd[n]);
      dw[c] += T(acc);
    }
  }
  // Backward does not see b, so a null db is what says "no bias".
  if (db) {
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int n = 0; n < N; n++) acc += double(dy[(size_t)n * C + c]);
      db[c] += T(acc);
    }
  }
}

}  // namespace canonlab
