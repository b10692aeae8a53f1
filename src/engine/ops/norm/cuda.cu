// RMSNorm / LayerNorm (cuda.h). Forward: one warp per row. Backward: one block per chunk of rows: its warps
// first reduce each row's statistics for dx into shared memory, then each thread walks its columns down the
// chunk, writing dx and summing the parameter gradients; a second kernel reduces the chunks in order.
// The float formulas follow fast.h line by line.
#include <cmath>
#include <string>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/norm/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
using Chunks = NormChunks;
Chunks chunks_for(int N) { return norm_backward_chunks(N); }

__global__ void rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;  // whole warps leave together
  const float* xr = x + size_t(row) * C;
  float* yr = y + size_t(row) * C;
  double ss = 0;
  for (int c = lane; c < C; c += kWarp) ss += double(xr[c]) * double(xr[c]);
  ss = warp_sum(ss);
  const float r = float(1.0 / sqrt(ss / C + double(eps)));
  for (int c = lane; c < C; c += kWarp) yr[c] = w ? xr[c] * r * w[c] : xr[c] * r;
  if (lane == 0) rstd[row] = r;
}

__global__ void layernorm_forward_kernel(float* y, float* mean, float* rstd, const float* x, const float* w,
                                         const float* b, int N, int C, float eps) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* xr = x + size_t(row) * C;
  float* yr = y + size_t(row) * C;
  // two passes, mean then centred squares, as on the CPU
  double s = 0;
  for (int c = lane; c < C; c += kWarp) s += double(xr[c]);
  const double m = warp_sum(s) / C;
  double var = 0;
  for (int c = lane; c < C; c += kWarp) var += (double(xr[c]) - m) * (double(xr[c]) - m);
  var = warp_sum(var);
  const float r = float(1.0 / sqrt(var / C + double(eps)));
  const float mt = float(m);
  for (int c = lane; c < C; c += kWarp) {
    float v = (xr[c] - mt) * r;
    if (w) v *= w[c];
    if (b) v += b[c];
    yr[c] = v;
  }
  if (lane == 0) {
    mean[row] = mt;
    rstd[row] = r;
  }
}

// Shared memory of one backward block: four floats per row of the chunk.
// rmsnorm: k = (mean(g ⊙ x)) r², with r = rstd;  layernorm: gm = mean(g), gxm = mean(g ⊙ xhat), r, m.
template <bool kLayerNorm>
__global__ void norm_backward_kernel(float* dx, double* partial_w, double* partial_b, const float* dy, const float* x,
                                     const float* w, const float* mean, const float* rstd, int N, int C,
                                     int chunk_rows) {
  extern __shared__ float row_stats[];  // [4][chunk_rows]
  float* s_a = row_stats;               // rms: k; ln: gm
  float* s_b = s_a + chunk_rows;        // ln: gxm
  float* s_r = s_b + chunk_rows;        // rstd
  float* s_m = s_r + chunk_rows;        // ln: mean
  const int n0 = blockIdx.x * chunk_rows, n1 = min(n0 + chunk_rows, N), rows = n1 - n0;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;

  for (int i = warp; i < rows; i += kWarpsPerBlock) {
    const int n = n0 + i;
    const float* xr = x + size_t(n) * C;
    const float* dyr = dy + size_t(n) * C;
    const float r = rstd[n];
    if (kLayerNorm) {
      const float m = mean[n];
      double gs = 0, gxs = 0;
      for (int c = lane; c < C; c += kWarp) {
        const float g = w ? dyr[c] * w[c] : dyr[c];
        gs += double(g);
        gxs += double(g) * double((xr[c] - m) * r);
      }
      gs = warp_sum(gs);
      gxs = warp_sum(gxs);
      if (lane == 0) {
        s_a[i] = float(gs / C);
        s_b[i] = float(gxs / C);
        s_r[i] = r;
        s_m[i] = m;
      }
    } else {
      double gx = 0;
      for (int c = lane; c < C; c += kWarp)
        gx += w ? double(dyr[c] * w[c]) * double(xr[c]) : double(dyr[c]) * double(xr[c]);
      gx = warp_sum(gx);
      if (lane == 0) {
        s_a[i] = float(gx / C) * r * r;
        s_r[i] = r;
      }
    }
  }
  __syncthreads();

  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float wc = w ? w[c] : 1.f;
    double acc_w = 0, acc_b = 0;
    for (int i = 0; i < rows; i++) {
      const size_t idx = size_t(n0 + i) * C + c;
      const float d = dy[idx], xv = x[idx], r = s_r[i];
      if (kLayerNorm) {
        const float m = s_m[i];
        const float g = w ? d * wc : d;
        dx[idx] = r * (g - s_a[i] - (xv - m) * r * s_b[i]);
        acc_w += double(d) * (double(xv) - double(m)) * double(r);
        acc_b += double(d);
      } else {
        dx[idx] = w ? r * (d * wc - xv * s_a[i]) : r * (d - xv * s_a[i]);
        acc_w += double(d) * double(xv) * double(r);
      }
    }
    if (partial_w) partial_w[size_t(blockIdx.x) * C + c] = acc_w;
    if (partial_b) partial_b[size_t(blockIdx.x) * C + c] = acc_b;
  }
}

// out[c] += Σ_chunk partial[chunk, c], chunks in order
__global__ void reduce_chunks_kernel(float* out, const double* partial, int chunks, int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    double s = 0;
    for (int k = 0; k < chunks; k++) s += partial[size_t(k) * C + c];
    out[c] += float(s);
  }
}

template <bool kLayerNorm>
void norm_backward(CudaStream stream, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const float* mean, const float* rstd, int N, int C, double* scratch) {
  if (N <= 0 || C <= 0) return;
  const Chunks ch = chunks_for(N);
  const bool want_w = w && dw, want_b = kLayerNorm && db;
  CANONLAB_CHECK(scratch || (!want_w && !want_b), "norm backward: scratch is null but parameter gradients are wanted");
  double* pw = want_w ? scratch : nullptr;
  double* pb = want_b ? scratch + size_t(ch.count) * C : nullptr;
  const size_t shared = size_t(4) * ch.rows * sizeof(float);
  norm_backward_kernel<kLayerNorm><<<ch.count, kThreads, shared, stream>>>(dx, pw, pb, dy, x, w, mean, rstd, N, C,
                                                                          ch.rows);
  CANONLAB_CUDA_CHECK_LAUNCH();
  const unsigned blocks = grid_for(size_t(C), kThreads);
  if (want_w) {
    reduce_chunks_kernel<<<blocks, kThreads, 0, stream>>>(dw, pw, ch.count, C);
    CANONLAB_CUDA_CHECK_LAUNCH();
  }
  if (want_b) {
    reduce_chunks_kernel<<<blocks, kThreads, 0, stream>>>(db, pb, ch.count, C);
    CANONLAB_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* w, int N, int C,
                     float eps) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_forward_kernel<<<(N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream>>>(y, rstd, x, w, N, C, eps);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(CudaStream stream, float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int N, int C, double* scratch) {
  norm_backward<false>(stream, dx, dw, nullptr, dy, x, w, nullptr, rstd, N, C, scratch);
}

void layernorm_forward(CudaStream stream, float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<(N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream>>>(y, mean, rstd, x, w, b,
                                                                                              N, C, eps);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(CudaStream stream, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C, double* scratch) {
  norm_backward<true>(stream, dx, dw, db, dy, x, w, mean, rstd, N, C, scratch);
}

}  // namespace canonlab::cuda
