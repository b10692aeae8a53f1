#pragma once
// Reference token embedding lookup. Plain loops, one thread.
#include <cstddef>

namespace canonlab {

// out: (N, C) written; tokens: (N); table: (V, C)
template <class T>
void embedding_forward_naive(T* out, const int* tokens, const T* table, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = table[(size_t)tokens[n] * C + c];
}

// dtable: (V, C) accumulated; dout: (N, C); tokens: (N). The vocabulary size is not passed, so there is no
// double-precision buffer to accumulate into: rows are added in token order, the same order as the fast path.
template <class T>
void embedding_backward_naive(T* dtable, const T* dout, const int* tokens, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) dtable[(size_t)tokens[n] * C + c] += dout[(size_t)n * C + c];
}

}  // namespace canonlab
