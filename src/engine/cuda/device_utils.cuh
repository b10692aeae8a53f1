#pragma once
// Device-side helpers shared by the kernels (included by .cu files only): launch sizes, deterministic warp
// and block reductions, bf16 conversion.
//
// Reductions are trees of fixed shape: the same inputs give the same bits on every run. The warp sums use an
// xor butterfly; since IEEE addition is commutative (a + b == b + a bit for bit), every lane ends with the same
// value. Nothing here, or anywhere in the CUDA kernels, uses floating-point atomics.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/cuda/check.h"
#include "engine/cuda/types.h"

namespace canonlab::cuda::detail {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than the items need.
inline unsigned grid_for(size_t n, int threads, unsigned max_blocks = 8192) {
  const size_t blocks = (n + size_t(threads) - 1) / size_t(threads);
  return unsigned(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

inline cudaStream_t native(CudaStream s) { return s; }

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) {
    const T o = __shfl_xor_sync(kFullMask, v, off);
    v = o > v ? o : v;
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result. `shared` holds
// 32 elements. The order is fixed: each warp's butterfly, then warp 0's butterfly over the warp sums.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_sum(total);
  return total;
}

template <class T>
__device__ T block_max(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T m = lane < warps ? shared[lane] : shared[0];
  return warp_max(m);
}

__device__ __forceinline__ __nv_bfloat16* as_native(Bf16* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
__device__ __forceinline__ const __nv_bfloat16* as_native(const Bf16* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

// First key query t sees: t − window < s <= t, or every s <= t when window is 0 (the CPU's window_start).
__host__ __device__ __forceinline__ int window_start(int t, int window) {
  return window > 0 ? (t - window + 1 > 0 ? t - window + 1 : 0) : 0;
}

}  // namespace canonlab::cuda::detail
