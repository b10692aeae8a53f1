// Embedding lookup and its scatter-add (cuda.h).
//
// The backward gives each block a range of vocabulary rows and a tile of columns. Every warp of the block reads
// the token ids 32 at a time, and a ballot finds those in the block's range; the matches are then processed in
// token order, each thread adding its column of dout into its own accumulator for that row (shared memory,
// touched by that thread alone). So no two threads ever write the same element, and each element's sum runs in
// token order. Every block scans all N ids, but the scan is one coalesced load and a ballot per 32 tokens.
#include <cmath>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/embedding/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kColumnTile = 128;        // columns per backward block: its threads
constexpr int kMaxRowsPerBlock = 96;    // accumulators: 96 · 128 floats = 48 KB of shared memory
constexpr int kTargetBlocks = 2048;     // enough blocks to fill the GPU, few enough that the scans stay cheap

__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* table, int C, int V, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / C, c = i % C;
    const int tok = tokens[row];
    out[i] = tok >= 0 && tok < V ? table[size_t(tok) * C + c] : NAN;
  }
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int* tokens, int N, int C, int V,
                                          int rows_per_block) {
  extern __shared__ float acc[];  // [rows_per_block][kColumnTile]; column threadIdx.x belongs to this thread
  const int v0 = blockIdx.x * rows_per_block, v1 = min(v0 + rows_per_block, V);
  const int c = blockIdx.y * kColumnTile + threadIdx.x, lane = threadIdx.x % kWarp;
  const bool active = c < C;
  for (int r = 0; r < v1 - v0; r++) acc[r * kColumnTile + threadIdx.x] = active ? dtable[size_t(v0 + r) * C + c] : 0.f;
  for (int n0 = 0; n0 < N; n0 += kWarp) {
    const int n = n0 + lane;
    const int tok = n < N ? tokens[n] : -1;
    unsigned mine = __ballot_sync(kFullMask, tok >= v0 && tok < v1);
    while (mine) {
      const int j = __ffs(mine) - 1;  // lowest set bit first: token order
      mine &= mine - 1;
      const int t = __shfl_sync(kFullMask, tok, j);
      if (active) acc[(t - v0) * kColumnTile + threadIdx.x] += dout[size_t(n0 + j) * C + c];
    }
  }
  if (active)
    for (int r = 0; r < v1 - v0; r++) dtable[size_t(v0 + r) * C + c] = acc[r * kColumnTile + threadIdx.x];
}

}  // namespace

void embedding_forward(CudaStream stream, float* out, const int* tokens, const float* table, int N, int C, int V) {
  const size_t n = size_t(N) * C;
  if (!n) return;
  embedding_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, tokens, table, C, V, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void embedding_backward(CudaStream stream, float* dtable, const float* dout, const int* tokens, int N, int C, int V) {
  if (N <= 0 || C <= 0 || V <= 0) return;
  const int tiles = (C + kColumnTile - 1) / kColumnTile;
  // rows per block from V and C only: the result does not depend on it anyway (each element's sum is in token
  // order whoever owns it), only the speed does
  long long rows = (static_cast<long long>(V) * tiles + kTargetBlocks - 1) / kTargetBlocks;
  rows = rows < 1 ? 1 : (rows > kMaxRowsPerBlock ? kMaxRowsPerBlock : rows);
  const dim3 grid(unsigned((V + rows - 1) / rows), unsigned(tiles));
  embedding_backward_kernel<<<grid, kColumnTile, size_t(rows) * kColumnTile * sizeof(float), stream>>>(
      dtable, dout, tokens, N, C, V, int(rows));
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
