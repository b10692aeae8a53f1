#pragma once
// The elementwise and copying work the modules used to do in their own loops: residual adds, copies of column
// blocks between buffers of different row strides, the key shift, learned positions. Each output element is
// computed by one thread in a fixed order, so the threading changes no bit; small tensors stay on one thread,
// where the fork/join would cost more than the work.
#include <algorithm>
#include <cstddef>

namespace canonlab {

namespace elementwise_detail {
constexpr size_t kParallelMin = 1 << 14;
}  // namespace elementwise_detail

// out = a + b; out may alias a or b. (n)
template <class T>
void add(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for schedule(static) if (n >= elementwise_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// dst += src (n)
template <class T>
void add_into(T* dst, const T* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= elementwise_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// dst = src (n)
template <class T>
void copy(T* dst, const T* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= elementwise_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

// dst = 0 (n)
template <class T>
void fill_zero(T* dst, size_t n) {
#pragma omp parallel for schedule(static) if (n >= elementwise_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) dst[i] = T(0);
}

// dst (rows, cols) of row stride ldd = src (rows, cols) of row stride lds: moves a column block of one buffer into
// a column block of another (q|k|v splits, the Mamba2 in_proj row).
template <class T>
void copy_rows(T* dst, int ldd, const T* src, int lds, int rows, int cols) {
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= elementwise_detail::kParallelMin)
  for (int r = 0; r < rows; r++) std::copy(src + size_t(r) * lds, src + size_t(r) * lds + cols, dst + size_t(r) * ldd);
}

// x = x · coef, the product in double (gradient clipping). (n)
template <class T>
void scale(T* x, size_t n, double coef) {
#pragma omp parallel for schedule(static) if (n >= elementwise_detail::kParallelMin)
  for (size_t i = 0; i < n; i++) x[i] = T(double(x[i]) * coef);
}

// The key shift: xs[b, t] = x[b, t] + x[b, t − o], x[b, t] alone for t < o.  x, xs: (B, Tn, C)
template <class T>
void shift_add_forward(T* xs, const T* x, int B, int Tn, int C, int o) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++) {
      const T* cur = x + (size_t(b) * Tn + t) * C;
      T* out = xs + (size_t(b) * Tn + t) * C;
      if (t >= o) {
        const T* prev = cur - size_t(o) * C;
        for (int c = 0; c < C; c++) out[c] = cur[c] + prev[c];
      } else {
        for (int c = 0; c < C; c++) out[c] = cur[c];
      }
    }
}
// Its transpose, accumulated: dx[b, t] += dxs[b, t] + dxs[b, t + o] (the second term while t + o < Tn).
template <class T>
void shift_add_backward(T* dx, const T* dxs, int B, int Tn, int C, int o) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++) {
      T* out = dx + (size_t(b) * Tn + t) * C;
      const T* cur = dxs + (size_t(b) * Tn + t) * C;
      for (int c = 0; c < C; c++) out[c] += cur[c];
      if (t + o < Tn) {
        const T* next = cur + size_t(o) * C;
        for (int c = 0; c < C; c++) out[c] += next[c];
      }
    }
}

// Learned positions: x[b, t] += pe[t].  x: (B, Tn, C), pe: (>= Tn, C)
template <class T>
void add_positions(T* x, const T* pe, int B, int Tn, int C) {
#pragma omp parallel for schedule(static) if (size_t(B) * Tn * C >= elementwise_detail::kParallelMin)
  for (int r = 0; r < B * Tn; r++) {
    T* xr = x + size_t(r) * C;
    const T* pr = pe + size_t(r % Tn) * C;
    for (int c = 0; c < C; c++) xr[c] += pr[c];
  }
}
// dpe[t] += Σ_b dx[b, t], added one sequence after another (b = 0, 1, ...), so every thread count gives the
// same bits. One position per thread: no two threads write the same row.
template <class T>
void add_positions_backward(T* dpe, const T* dx, int B, int Tn, int C) {
#pragma omp parallel for schedule(static) if (size_t(B) * Tn * C >= elementwise_detail::kParallelMin)
  for (int t = 0; t < Tn; t++) {
    T* d = dpe + size_t(t) * C;
    for (int b = 0; b < B; b++) {
      const T* src = dx + (size_t(b) * Tn + t) * C;
      for (int c = 0; c < C; c++) d[c] += src[c];
    }
  }
}

}  // namespace canonlab
