#pragma once
// Token embedding on the GPU: fast.h's ops with a leading stream, device pointers, and the vocabulary size V
// (the CPU ops do without it; the GPU backward sizes its grid by it, and both guard token ids with it).
#include "engine/cuda/types.h"

namespace canonlab::cuda {

// out: (N, C) written; tokens: (N); table: (V, C). A token outside [0, V) gives a row of NaN (the trainer's
// non-finite guard then names the embedding) instead of reading out of bounds.
void embedding_forward(CudaStream stream, float* out, const int* tokens, const float* table, int N, int C, int V);

// dtable: (V, C) accumulated; dout: (N, C); tokens: (N); tokens outside [0, V) are ignored. Deterministic and
// bit-identical to the CPU: every (row, column) of dtable is owned by one thread, which adds that column of
// every matching token in token order, in fp32, starting from dtable's value, as the CPU loop does. No atomics.
void embedding_backward(CudaStream stream, float* dtable, const float* dout, const int* tokens, int N, int C, int V);

}  // namespace canonlab::cuda
