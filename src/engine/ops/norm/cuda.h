#pragma once
// RMSNorm and LayerNorm on the GPU: the CPU ops of fast.h with a leading stream, device pointers. w == nullptr
// means no learnable scale (and b == nullptr no bias), as on the CPU.
//
// Parameter gradients are deterministic without atomics: each block of the backward owns a fixed chunk of rows
// and writes its partial column sums (in double) to scratch; a second kernel adds the chunks' partials in chunk
// order and accumulates the result into dw/db. The chunking depends only on N, so the bits depend only on the
// inputs. Row statistics are reduced in double, in a fixed tree.
#include <cstddef>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

// The backward's row chunks: a function of N alone, so the reduction order (and the bits) never depend on the GPU.
inline constexpr int kNormMinChunkRows = 64;
inline constexpr int kNormMaxChunkRows = 2048;  // 4 floats per row in shared memory: 32 KB
inline constexpr int kNormMaxChunks = 1024;     // exceeded only past kNormMaxChunks · kNormMaxChunkRows = 2M rows
struct NormChunks {
  int rows;   // rows per chunk (the last may have fewer)
  int count;  // number of chunks
};
inline NormChunks norm_backward_chunks(int N) {
  int rows = (N + kNormMaxChunks - 1) / kNormMaxChunks;
  rows = rows < kNormMinChunkRows ? kNormMinChunkRows : (rows > kNormMaxChunkRows ? kNormMaxChunkRows : rows);
  return {rows, (N + rows - 1) / rows};
}
// Doubles of scratch the backward needs for N rows of C channels (pass nullptr when neither dw nor db is wanted).
inline size_t norm_backward_scratch_size(int N, int C) {
  if (N <= 0 || C <= 0) return 0;
  return size_t(2) * norm_backward_chunks(N).count * C;
}

// y, x: (N, C); rstd: (N) saved for backward; w: (C) or nullptr
void rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* w, int N, int C, float eps);
// dx: (N, C) written; dw: (C) accumulated when w and dw are non-null; scratch: norm_backward_scratch_size(N, C)
void rmsnorm_backward(CudaStream stream, float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int N, int C, double* scratch);

// y, x: (N, C); mean, rstd: (N) saved for backward; w, b: (C) or nullptr
void layernorm_forward(CudaStream stream, float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps);
// dx: (N, C) written; dw: (C) accumulated when w and dw are non-null; db: (C) accumulated when non-null
void layernorm_backward(CudaStream stream, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C, double* scratch);

}  // namespace canonlab::cuda
