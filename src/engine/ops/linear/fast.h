#pragma once
// Linear layer on BLAS: the three products are single GEMMs over all N rows, so OpenBLAS threads them.
#include <algorithm>
#include <cstddef>

#include "engine/blas.h"

namespace canonlab {

// y: (N, OUT) rows of stride ldy <- every row set to b: (OUT). Preloading the bias lets the GEMM add it through
// beta = 1 instead of a second pass over y.
template <class T>
void linear_bias_fill(T* y, int ldy, const T* b, int N, int OUT) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T* yn = y + (size_t)n * ldy;
    for (int o = 0; o < OUT; o++) yn[o] = b[o];
  }
}

// db: (OUT) += the column sums of dy: (N, OUT) stride lddy. Each column block is summed over all rows by one thread
// in row order, so db does not depend on the thread count. 16 columns = one cache line of floats, so threads never
// share a line of db.
template <class T>
void linear_bias_backward(T* db, const T* dy, int lddy, int N, int OUT) {
  constexpr int CB = 16;
  int nblocks = (OUT + CB - 1) / CB;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int o0 = blk * CB, cb = std::min(CB, OUT - o0);
    double acc[CB] = {};
    for (int n = 0; n < N; n++) {
      const T* dyn = dy + (size_t)n * lddy + o0;
      for (int j = 0; j < cb; j++) acc[j] += double(dyn[j]);
    }
    for (int j = 0; j < cb; j++) db[o0 + j] += T(acc[j]);
  }
}

// y: (N, OUT) rows of stride ldy; x: (N, IN) rows of stride ldx; w: (OUT, IN); b: (OUT) or nullptr
template <class T>
void linear_forward(T* y, int ldy, const T* x, int ldx, const T* w, const T* b, int N, int IN, int OUT) {
  if (N <= 0 || OUT <= 0) return;
  if (b) linear_bias_fill(y, ldy, b, N, OUT);
  // y (N, OUT) = x (N, IN) @ w^T (IN, OUT)
  gemm(false, true, N, OUT, IN, T(1), x, ldx, w, IN, b ? T(1) : T(0), y, ldy);
}

// dx: (N, IN) stride lddx, written (skipped if nullptr); dw: (OUT, IN) and db: (OUT) accumulated
// (db skipped if nullptr); dy: (N, OUT) stride lddy
template <class T>
void linear_backward(T* dx, int lddx, T* dw, T* db, const T* dy, int lddy, const T* x, int ldx, const T* w, int N,
                     int IN, int OUT) {
  if (N <= 0) return;
  // dx (N, IN) = dy (N, OUT) @ w (OUT, IN)
  if (dx) gemm(false, false, N, IN, OUT, T(1), dy, lddy, w, IN, T(0), dx, lddx);
  // dw (OUT, IN) += dy^T (OUT, N) @ x (N, IN)
  gemm(true, false, OUT, IN, N, T(1), dy, lddy, x, ldx, T(1), dw, IN);
  if (db) linear_bias_backward(db, dy, lddy, N, OUT);
}

}  // namespace canonlab
