// Elementwise helpers (cuda.h): grid-stride loops, one element per thread per iteration.
#include <cuda_bf16.h>

#include <cmath>

#include "engine/cuda/device_utils.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/ops/elementwise/cuda.h"
#include "engine/ops/elementwise/element_kernels.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;

__global__ void copy_kernel(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void add_into_kernel(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void scale_kernel(float* y, const float* x, float s, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = s * x[i];
}

// one (row, column) per thread: columns along x so each row is read and written coalesced
template <bool kAccumulate>
__global__ void columns_kernel(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    if (kAccumulate) dst[r * ld_dst + c] += src[r * ld_src + c];
    else dst[r * ld_dst + c] = src[r * ld_src + c];
  }
}

__global__ void shift_add_kernel(float* xs, const float* x, int Tn, int C, int offset, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int t = int((i / C) % Tn);
    xs[i] = t >= offset ? x[i] + x[i - size_t(offset) * C] : x[i];
  }
}

__global__ void shift_add_backward_kernel(float* dx, const float* dxs, int Tn, int C, int offset, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int t = int((i / C) % Tn);
    // the same association as the CPU: (dx + dxs[t]) + dxs[t + o]
    float v = dx[i] + dxs[i];
    if (t + offset < Tn) v += dxs[i + size_t(offset) * C];
    dx[i] = v;
  }
}

__global__ void to_bf16_kernel(__nv_bfloat16* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void columns_to_bf16_kernel(__nv_bfloat16* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    dst[r * ld_dst + c] = __float2bfloat16_rn(src[r * ld_src + c]);
  }
}

__global__ void from_bf16_kernel(float* dst, const __nv_bfloat16* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

__global__ void count_non_finite_kernel(int* count, const float* x, size_t n) {
  __shared__ int shared[kWarp];
  int local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    local += isfinite(x[i]) ? 0 : 1;
  const int total = block_sum(local, shared);
  // an integer atomic: the count is exact whatever order the blocks arrive in
  if (threadIdx.x == 0 && total) atomicAdd(count, total);
}

}  // namespace

void fill_zero(CudaStream stream, float* dst, size_t n) {
  if (n) CANONLAB_CUDA_CHECK(cudaMemsetAsync(dst, 0, n * sizeof(float), stream));
}

void copy(CudaStream stream, float* dst, const float* src, size_t n) {
  if (!n) return;
  copy_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void add(CudaStream stream, float* out, const float* a, const float* b, size_t n) {
  if (!n) return;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void add_into(CudaStream stream, float* dst, const float* src, size_t n) {
  if (!n) return;
  add_into_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void scale(CudaStream stream, float* y, const float* x, float s, size_t n) {
  if (!n) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, x, s, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void copy_columns(CudaStream stream, float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  const size_t n = size_t(rows) * cols;
  if (rows <= 0 || cols <= 0) return;
  columns_kernel<false><<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void add_columns(CudaStream stream, float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  const size_t n = size_t(rows) * cols;
  if (rows <= 0 || cols <= 0) return;
  columns_kernel<true><<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void shift_add(CudaStream stream, float* xs, const float* x, int B, int Tn, int C, int offset) {
  CANONLAB_CHECK(offset >= 1, "shift_add: offset must be >= 1, got " + std::to_string(offset));
  const size_t n = size_t(B) * Tn * C;
  if (!n) return;
  shift_add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(xs, x, Tn, C, offset, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void shift_add_backward(CudaStream stream, float* dx, const float* dxs, int B, int Tn, int C, int offset) {
  CANONLAB_CHECK(offset >= 1, "shift_add_backward: offset must be >= 1, got " + std::to_string(offset));
  const size_t n = size_t(B) * Tn * C;
  if (!n) return;
  shift_add_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dx, dxs, Tn, C, offset, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void convert_to_bf16(CudaStream stream, Bf16* dst, const float* src, size_t n) {
  if (!n) return;
  to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(dst), src, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void convert_columns_to_bf16(CudaStream stream, Bf16* dst, int ld_dst, const float* src, int ld_src, int rows,
                             int cols) {
  const size_t n = size_t(rows) * cols;
  if (rows <= 0 || cols <= 0) return;
  columns_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(dst),
                                                                           ld_dst, src, ld_src, rows, cols);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void convert_from_bf16(CudaStream stream, float* dst, const Bf16* src, size_t n) {
  if (!n) return;
  from_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, reinterpret_cast<const __nv_bfloat16*>(src),
                                                                     n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void count_non_finite(CudaStream stream, int* count, const float* x, size_t n) {
  CANONLAB_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int), stream));
  if (!n) return;
  count_non_finite_kernel<<<grid_for(n, kThreads, 1024), kThreads, 0, stream>>>(count, x, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void add_positions(CudaStream stream, float* x, const float* pe, int B, int Tn, int C) {
  add_positions_elements(DeviceLaunch{stream}, x, pe, B, Tn, C);
}

void add_positions_backward(CudaStream stream, float* dpe, const float* dx, int B, int Tn, int C) {
  add_positions_backward_elements(DeviceLaunch{stream}, dpe, dx, B, Tn, C);
}

void round_to_bf16(CudaStream stream, float* dst, const float* src, size_t n) {
  round_to_bf16_elements(DeviceLaunch{stream}, dst, src, n);
}

void first_non_finite(CudaStream stream, int64_t* index, const float* x, size_t n, int64_t* scratch) {
  first_non_finite_elements(DeviceLaunch{stream}, index, x, n, scratch);
}

}  // namespace canonlab::cuda
