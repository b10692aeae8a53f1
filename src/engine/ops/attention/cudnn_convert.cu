// The bf16 → fp32 strided conversion cudnn.cpp needs for the backward's gradients (cudnn.h): cuDNN writes dq, dk,
// dv as contiguous bf16, the caller's fp32 buffers have row stride ld_dqkv. fp32 → bf16 and the contiguous widening
// are elementwise/cuda.h's. A grid-stride loop, one element per thread per step: exact, order-free.
#include <cuda_bf16.h>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/attention/cudnn.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;

__global__ void columns_from_bf16_kernel(float* dst, int ld_dst, const __nv_bfloat16* src, int ld_src, int rows,
                                         int cols) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    dst[r * ld_dst + c] = __bfloat162float(src[r * ld_src + c]);
  }
}

}  // namespace

void convert_columns_from_bf16(CudaStream stream, float* dst, int ld_dst, const Bf16* src, int ld_src, int rows,
                               int cols) {
  if (rows <= 0 || cols <= 0) return;
  const size_t n = size_t(rows) * cols;
  columns_from_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      dst, ld_dst, reinterpret_cast<const __nv_bfloat16*>(src), ld_src, rows, cols);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
