#pragma once
// Token embedding lookup. Forward is threaded over tokens. Backward scatters into rows that many tokens
// share, so it is threaded over channel blocks instead: every thread walks all tokens in order for its own
// columns, which is race-free, needs no atomics and gives the same dtable for any thread count (and the
// same bits as the naive version).
#include <algorithm>
#include <cstddef>

namespace canonlab {

// out: (N, C) written; tokens: (N); table: (V, C)
template <class T>
void embedding_forward(T* out, const int* tokens, const T* table, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* src = table + (size_t)tokens[n] * C;
    T* dst = out + (size_t)n * C;
    for (int c = 0; c < C; c++) dst[c] = src[c];
  }
}

// dtable: (V, C) accumulated; dout: (N, C); tokens: (N)
template <class T>
void embedding_backward(T* dtable, const T* dout, const int* tokens, int N, int C) {
  // 16 floats = one cache line, so threads never write the same line
  constexpr int CB = 16;
  const int nblocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * CB, cb = std::min(CB, C - c0);
    for (int n = 0; n < N; n++) {
      T* dst = dtable + (size_t)tokens[n] * C + c0;
      const T* src = dout + (size_t)n * C + c0;
      for (int j = 0; j < cb; j++) dst[j] += src[j];
    }
  }
}

}  // namespace canonlab
