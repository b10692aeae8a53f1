// Gradient norm, clipping and AdamW over the flat parameter buffer (cuda.h).
#include <cuda_bf16.h>

#include <cmath>

#include "engine/cuda/device_utils.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/ops/adamw/cuda.h"
#include "engine/ops/elementwise/element_kernels.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;

__global__ void sum_squares_slices_kernel(double* partial, const float* g, size_t n) {
  __shared__ double shared[kWarp];
  const size_t lo = n * blockIdx.x / kNormBlocks, hi = n * (blockIdx.x + 1) / kNormBlocks;
  double s = 0;
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) s += double(g[i]) * double(g[i]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_slices_kernel(double* sumsq, const double* partial) {
  __shared__ double shared[kWarp];
  double s = 0;
  for (int i = threadIdx.x; i < kNormBlocks; i += blockDim.x) s += partial[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *sumsq = s;
}

// The clipping factor clip_grad_norm applies: 1 when there is nothing to clip.
__device__ __forceinline__ double clip_factor(double sumsq, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (sqrt(sumsq) + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

__global__ void clip_kernel(float* g, size_t n, const double* sumsq, double max_norm) {
  const double coef = clip_factor(*sumsq, max_norm);
  if (!(coef < 1.0)) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    g[i] = float(double(g[i]) * coef);
}

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, const uint8_t* decay, size_t n,
                             const AdamWCoefficients* coefficients, const int32_t* halted_at,
                             __nv_bfloat16* params_bf16) {
  if (*halted_at >= 0) return;  // the guard stopped the run: the parameters stay those of the step that went wrong
  const AdamWCoefficients c = *coefficients;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    // the CPU's statements in order, each rounded where it rounds (no contraction across them)
    const float g = grads[i];
    float p = params[i];
    if (decay[i]) p = __fmul_rn(p, c.decay_shrink);
    const float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(1.f - c.beta1, g));
    const float vi = __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(__fmul_rn(1.f - c.beta2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fmul_rn(sqrtf(vi), c.rsqrt_bc2), c.eps);
    p = __fsub_rn(p, __fdiv_rn(__fmul_rn(c.step, mi), denom));
    params[i] = p;
    if (params_bf16) params_bf16[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace


void grad_sum_squares(CudaStream stream, double* sumsq, const float* grads, size_t n, double* scratch) {
  sum_squares_slices_kernel<<<kNormBlocks, kThreads, 0, stream>>>(scratch, grads, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
  sum_slices_kernel<<<1, 1024, 0, stream>>>(sumsq, scratch);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void clip_grad_norm(CudaStream stream, float* grads, size_t n, const double* sumsq, double max_norm) {
  if (!n || max_norm <= 0) return;
  clip_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(grads, n, sumsq, max_norm);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void step_guard(CudaStream stream, int32_t* halted_at, const int32_t* step, const double* values, int n) {
  step_guard_elements(DeviceLaunch{stream}, halted_at, step, values, n);
}

void adamw_update(CudaStream stream, float* params, float* m, float* v, const float* grads, const uint8_t* decay,
                  size_t n, const AdamWCoefficients* c, const int32_t* halted_at, Bf16* params_bf16) {
  if (!n) return;
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(params, m, v, grads, decay, n, c, halted_at,
                                                               reinterpret_cast<__nv_bfloat16*>(params_bf16));
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
