#pragma once
// Elementwise activations. Naive and fast are the same code: each element is independent, so threading
// changes nothing numerically. Small tensors stay on one thread, where the fork/join would cost more than
// the work.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/ops/vec_math.h"

namespace canonlab {

namespace activation_detail {
constexpr size_t kParallelMin = 1 << 15;
}  // namespace activation_detail

// σ(x) through vec_exp so that float loops vectorise (std::exp would keep them scalar, and cost as much as the
// GEMM that produced the activations); for large |x| it saturates, which leaves σ at 0 or 1 to float precision.
template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + vec_exp(-x));
}

// softplus(x) = log(1 + e^x) in double, = x above 20 (PyTorch's threshold), where the difference is below
// double resolution of x. For the dt and decay gates of Mamba2 and Gated DeltaNet.
inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// exact GELU: y = x Φ(x), Φ(x) = erfc(−x/√2)/2 (erfc rather than 1 + erf keeps Φ accurate for negative x,
// where it is tiny); y, x: (n)
template <class T>
void gelu_forward(T* y, const T* x, size_t n) {
  const T inv_sqrt2 = T(0.70710678118654752440);
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) y[i] = x[i] * (T(0.5) * vec_erfc(-x[i] * inv_sqrt2));
}
// dx = dy (Φ(x) + x φ(x))
template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) {
    T cdf, pdf;
    vec_normal_cdf_pdf(x[i], cdf, pdf);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

// y = x σ(x)
template <class T>
void silu_forward(T* y, const T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) y[i] = x[i] * sigmoid(x[i]);
}
// dx = dy σ(x) (1 + x (1 − σ(x)))
template <class T>
void silu_backward(T* dx, const T* dy, const T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) {
    T s = sigmoid(x[i]);
    dx[i] = dy[i] * s * (T(1) + x[i] * (T(1) - s));
  }
}

// y = max(x, 0)²
template <class T>
void relu2_forward(T* y, const T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) {
    T r = x[i] > T(0) ? x[i] : T(0);
    y[i] = r * r;
  }
}
// dx = 2 max(x, 0) dy
template <class T>
void relu2_backward(T* dx, const T* dy, const T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) dx[i] = x[i] > T(0) ? T(2) * x[i] * dy[i] : T(0);
}

// ELU with alpha = 1 over n values: y = x for x > 0, eˣ − 1 otherwise (expm1 keeps precision near 0; SLEEF's
// vector expm1, vec_math.h). y may alias x. Also the row loop of the fused Canon op (canon_conv/fused.h).
template <class T>
inline void elu_row(T* y, const T* x, size_t n) {
  constexpr size_t CH = 64;
  T e[CH];
  for (size_t i0 = 0; i0 < n; i0 += CH) {
    const size_t m = n - i0 < CH ? n - i0 : CH;
    vec_expm1(e, x + i0, m);
    for (size_t j = 0; j < m; j++) y[i0 + j] = x[i0 + j] > T(0) ? x[i0 + j] : e[j];
  }
}
// dx = dy for x > 0, dy eˣ otherwise. dx may alias dy.
template <class T>
inline void elu_backward_row(T* dx, const T* dy, const T* x, size_t n) {
  for (size_t i = 0; i < n; i++) dx[i] = x[i] > T(0) ? dy[i] : dy[i] * vec_exp(x[i]);
}
template <class T>
void elu_forward(T* y, const T* x, size_t n) {
  constexpr size_t CH = 4096;
  const long chunks = long((n + CH - 1) / CH);
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (long c = 0; c < chunks; c++) elu_row(y + c * CH, x + c * CH, std::min(CH, n - c * CH));
}
template <class T>
void elu_backward(T* dx, const T* dy, const T* x, size_t n) {
  constexpr size_t CH = 4096;
  const long chunks = long((n + CH - 1) / CH);
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (long c = 0; c < chunks; c++) elu_backward_row(dx + c * CH, dy + c * CH, x + c * CH, std::min(CH, n - c * CH));
}

// gate_up: (N, 2·Hd) = [gate | up]; y: (N, Hd) = silu(gate) ⊙ up
template <class T>
void swiglu_forward(T* y, const T* gate_up, int N, int Hd) {
#pragma omp parallel for schedule(static) if ((size_t)N * Hd >= activation_detail::kParallelMin)
  for (int n = 0; n < N; n++) {
    const T* gate = gate_up + (size_t)n * 2 * Hd;
    const T* up = gate + Hd;
    T* yn = y + (size_t)n * Hd;
    for (int i = 0; i < Hd; i++) yn[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
}
// dgate_up: (N, 2·Hd) written; dy: (N, Hd)
template <class T>
void swiglu_backward(T* dgate_up, const T* dy, const T* gate_up, int N, int Hd) {
#pragma omp parallel for schedule(static) if ((size_t)N * Hd >= activation_detail::kParallelMin)
  for (int n = 0; n < N; n++) {
    const T* gate = gate_up + (size_t)n * 2 * Hd;
    const T* up = gate + Hd;
    const T* dyn = dy + (size_t)n * Hd;
    T* dgate = dgate_up + (size_t)n * 2 * Hd;
    T* dup = dgate + Hd;
    for (int i = 0; i < Hd; i++) {
      T s = sigmoid(gate[i]);
      dgate[i] = dyn[i] * up[i] * s * (T(1) + gate[i] * (T(1) - s));
      dup[i] = dyn[i] * gate[i] * s;
    }
  }
}

// One element of sign and of the clipped straight-through gradient, shared by the whole-buffer loops below and the
// row loops of rows.h (which run inside their own parallel region and must not open another one per row).
template <class T>
inline T sign_value(T x) {
  return x >= T(0) ? T(1) : (x < T(0) ? T(-1) : x);  // NaN stays NaN
}
template <class T>
inline T clipped_ste_value(T dy, T x) {
  return std::abs(x) > T(1) ? T(0) : dy;
}

// y = +1 for x >= 0 (so sign(0) = +1, also for −0), −1 for x < 0; NaN stays NaN so the non-finite checks
// downstream still see it.
template <class T>
void sign_forward(T* y, const T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) y[i] = sign_value(x[i]);
}
// Straight-through estimator: dx = dy, or with clipped, dx = dy where |x| <= 1 and 0 where |x| > 1.
template <class T>
void sign_ste_backward(T* dx, const T* dy, const T* x, size_t n, bool clipped) {
  if (!clipped) {
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
    for (size_t i = 0; i < n; i++) dx[i] = dy[i];
    return;
  }
#pragma omp parallel for schedule(static) if (n >= activation_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) dx[i] = clipped_ste_value(dy[i], x[i]);
}

}  // namespace canonlab
