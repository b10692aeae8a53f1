// Cross entropy (cuda.h): one block per row; max and Σ exp(x − max) (the exponentials in float, the sum in
// double) reduced in a fixed tree, as cross_entropy.h does with its lanes.
#include <cmath>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/cross_entropy/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kMeanThreads = 1024;

struct RowStats {
  float max;
  double sum;
};

__device__ RowStats row_stats(const float* row, int V) {
  __shared__ float smax[kWarp];
  __shared__ double ssum[kWarp];
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) m = row[v] > m ? row[v] : m;
  m = block_max(m, smax);
  double s = 0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += double(expf(row[v] - m));
  s = block_sum(s, ssum);
  return {m, s};
}

__global__ void cross_entropy_forward_kernel(float* losses, const float* logits, const int* targets, int V) {
  const int n = blockIdx.x;
  const float* row = logits + size_t(n) * V;
  const RowStats st = row_stats(row, V);
  if (threadIdx.x == 0) {
    const int t = targets[n];
    losses[n] = t >= 0 && t < V ? float(double(st.max) + log(st.sum) - double(row[t])) : NAN;
  }
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits, const int* targets,
                                              const float* dlosses, int V) {
  const int n = blockIdx.x;
  const float* row = logits + size_t(n) * V;
  float* drow = dlogits + size_t(n) * V;
  const RowStats st = row_stats(row, V);
  const int t = targets[n];
  const bool valid = t >= 0 && t < V;
  const float dl = dlosses[n], scale = float(double(dl) / st.sum);
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    // explicit roundings: the product, then the subtraction, as the CPU's two statements
    const float p = __fmul_rn(expf(row[v] - st.max), scale);
    drow[v] = !valid ? NAN : (v == t ? __fsub_rn(p, dl) : p);
  }
}

__global__ void masked_mean_kernel(double* loss, float* dlosses, const float* losses, const float* mask, int N,
                                   const double* denominator) {
  __shared__ double shared[kWarp];
  double total = 0, weight = 0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    if (mask[i] == 0.f) continue;  // a masked row's loss is never read, NaN or not
    total += double(mask[i]) * double(losses[i]);
    weight += double(mask[i]);
  }
  total = block_sum(total, shared);
  weight = block_sum(weight, shared);
  if (denominator && *denominator > 0) weight = *denominator;
  if (threadIdx.x == 0) *loss = weight > 0 ? total / weight : 0.0;
  if (dlosses)
    for (int i = threadIdx.x; i < N; i += blockDim.x) dlosses[i] = weight > 0 ? float(double(mask[i]) / weight) : 0.f;
}

}  // namespace

void cross_entropy_forward(CudaStream stream, float* losses, const float* logits, const int* targets, int N, int V) {
  if (N <= 0) return;
  cross_entropy_forward_kernel<<<N, kThreads, 0, stream>>>(losses, logits, targets, V);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(CudaStream stream, float* dlogits, const float* logits, const int* targets,
                            const float* dlosses, int N, int V) {
  if (N <= 0) return;
  cross_entropy_backward_kernel<<<N, kThreads, 0, stream>>>(dlogits, logits, targets, dlosses, V);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void masked_mean_loss(CudaStream stream, double* loss, float* dlosses, const float* losses, const float* mask, int N,
                      const double* denominator) {
  masked_mean_kernel<<<1, kMeanThreads, 0, stream>>>(loss, dlosses, losses, mask, N < 0 ? 0 : N, denominator);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
