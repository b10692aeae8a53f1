#pragma once
// The elementwise and copying work the modules used to do in their own loops: residual adds, copies of column
// blocks between buffers of different row strides, the key shift, learned positions. Each op keeps the threading
// of the loop it replaced, so the seam adds no fork/join to a step: the key shift was an OpenMP loop, the residual
// adds, copies, clipping and positions ran on one thread (memory-bound work at these sizes; extra barriers cost
// more than they gain when the machine is shared -- measured in BENCHMARKS.md, "Backend seam").
#include <algorithm>
#include <cstddef>

namespace canonlab {

// out = a + b; out may alias a or b. (n)
template <class T>
void add(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// dst += src (n)
template <class T>
void add_into(T* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// dst = src (n)
template <class T>
void copy(T* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

// dst = 0 (n)
template <class T>
void fill_zero(T* dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = T(0);
}

// dst (rows, cols) of row stride ldd = src (rows, cols) of row stride lds: moves a column block of one buffer into
// a column block of another (q|k|v splits, the Mamba2 in_proj row).
template <class T>
void copy_rows(T* dst, int ldd, const T* src, int lds, int rows, int cols) {
  for (int r = 0; r < rows; r++) std::copy(src + size_t(r) * lds, src + size_t(r) * lds + cols, dst + size_t(r) * ldd);
}

// x = x · coef, the product in double (gradient clipping). (n)
template <class T>
void scale(T* x, size_t n, double coef) {
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
  for (int r = 0; r < B * Tn; r++) {
    T* xr = x + size_t(r) * C;
    const T* pr = pe + size_t(r % Tn) * C;
    for (int c = 0; c < C; c++) xr[c] += pr[c];
  }
}
// dpe[t] += Σ_b dx[b, t], added one sequence after another (b = 0, 1, ...), so every thread count gives the
// same bits.
template <class T>
void add_positions_backward(T* dpe, const T* dx, int B, int Tn, int C) {
  for (int t = 0; t < Tn; t++) {
    T* d = dpe + size_t(t) * C;
    for (int b = 0; b < B; b++) {
      const T* src = dx + (size_t(b) * Tn + t) * C;
      for (int c = 0; c < C; c++) d[c] += src[c];
    }
  }
}

}  // namespace canonlab
