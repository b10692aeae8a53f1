#pragma once
// Runs element kernels (engine/ops/element_kernels.h) on a stream: one thread per element, in a grid-stride loop,
// one CUDA kernel each. Kernels on one stream run in order, so each sees everything earlier ones wrote; each
// element sums in its kernel's fixed order, so the bits do not depend on the grid. Nothing is allocated or
// synchronised: a sequence of element kernels can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/cuda/device_utils.cuh"

namespace canonlab::cuda {

namespace detail {

template <class Kernel>
__global__ void element_kernel(Kernel kernel, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) kernel(i);
}

}  // namespace detail

struct DeviceLaunch {
  CudaStream stream;
  static constexpr int kThreads = 128;

  template <class Kernel>
  void operator()(size_t n, const Kernel& kernel) const {
    if (n == 0) return;
    detail::element_kernel<<<detail::grid_for(n, kThreads, 65535), kThreads, 0, stream>>>(kernel, n);
    CANONLAB_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace canonlab::cuda
