#pragma once
// Reference linear layer: y = x w^T + b with PyTorch's (OUT, IN) weight layout. Plain loops, one thread,
// double accumulators; the fast path is tested against this.
#include <cstddef>
#include <vector>

namespace canonlab {

// y: (N, OUT) rows of stride ldy; x: (N, IN) rows of stride ldx; w: (OUT, IN); b: (OUT) or nullptr
template <class T>
void linear_forward_naive(T* y, int ldy, const T* x, int ldx, const T* w, const T* b, int N, int IN, int OUT) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (size_t)n * ldx;
    T* yn = y + (size_t)n * ldy;
    for (int o = 0; o < OUT; o++) {
      const T* wo = w + (size_t)o * IN;
      double acc = b ? double(b[o]) : 0.0;
      for (int i = 0; i < IN; i++) acc += double(xn[i]) * double(wo[i]);
      yn[o] = T(acc);
    }
  }
}

// dx: (N, IN) stride lddx, written (skipped if nullptr); dw: (OUT, IN) and db: (OUT) accumulated
// (db skipped if nullptr); dy: (N, OUT) stride lddy
template <class T>
void linear_backward_naive(T* dx, int lddx, T* dw, T* db, const T* dy, int lddy, const T* x, int ldx, const T* w, int N,
                           int IN, int OUT) {
  if (dx) {
    // dx = dy w
    for (int n = 0; n < N; n++) {
      const T* dyn = dy + (size_t)n * lddy;
      for (int i = 0; i < IN; i++) {
        double acc = 0;
        for (int o = 0; o < OUT; o++) acc += double(dyn[o]) * double(w[(size_t)o * IN + i]);
        dx[(size_t)n * lddx + i] = T(acc);
      }
    }
  }
  // dw += dy^T x, rows outermost so both operands are read along their rows
  std::vector<double> dw_acc((size_t)OUT * IN, 0.0);
  for (int n = 0; n < N; n++) {
    const T* dyn = dy + (size_t)n * lddy;
    const T* xn = x + (size_t)n * ldx;
    for (int o = 0; o < OUT; o++)
      for (int i = 0; i < IN; i++) dw_acc[(size_t)o * IN + i] += double(dyn[o]) * double(xn[i]);
  }
  for (size_t e = 0; e < dw_acc.size(); e++) dw[e] += T(dw_acc[e]);
  if (db) {
    for (int o = 0; o < OUT; o++) {
      double acc = 0;
      for (int n = 0; n < N; n++) acc += double(dy[(size_t)n * lddy + o]);
      db[o] += T(acc);
    }
  }
}

}  // namespace canonlab
