// Elementwise activations (cuda.h) over the formulas of cuda_math.cuh: they agree with the CPU's to a few ulp,
// not bit for bit (the CPU evaluates exp and erfc with its own polynomials).
#include <cmath>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/activation/cuda.h"
#include "engine/ops/activation/cuda_math.cuh"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;

template <class F>
__global__ void forward_kernel(float* y, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = F::forward(x[i]);
}

template <class F>
__global__ void backward_kernel(float* dx, const float* dy, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dx[i] = F::backward(dy[i], x[i]);
}

template <class F>
void launch_forward(CudaStream stream, float* y, const float* x, size_t n) {
  if (!n) return;
  forward_kernel<F><<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, x, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}
template <class F>
void launch_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n) {
  if (!n) return;
  backward_kernel<F><<<grid_for(n, kThreads), kThreads, 0, stream>>>(dx, dy, x, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

__global__ void swiglu_forward_kernel(float* y, const float* gate_up, int Hd, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / Hd, col = i % Hd;
    const float g = gate_up[row * 2 * Hd + col], u = gate_up[row * 2 * Hd + Hd + col];
    y[i] = g * sigmoid(g) * u;
  }
}

__global__ void swiglu_backward_kernel(float* dgate_up, const float* dy, const float* gate_up, int Hd, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / Hd, col = i % Hd;
    const size_t gi = row * 2 * Hd + col, ui = gi + Hd;
    const float g = gate_up[gi], u = gate_up[ui], d = dy[i], s = sigmoid(g);
    dgate_up[gi] = d * u * s * (1.f + g * (1.f - s));
    dgate_up[ui] = d * g * s;
  }
}

__device__ __forceinline__ float ste(float dy, float x, bool clipped) {
  return clipped && fabsf(x) > 1.f ? 0.f : dy;
}

__global__ void ste_kernel(float* dx, const float* dy, const float* x, size_t n, bool clipped) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dx[i] = ste(dy[i], x[i], clipped);
}

__global__ void sign_columns_kernel(float* y, int ldy, const float* x, int ldx, int cols, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    y[r * ldy + c] = Sign::forward(x[r * ldx + c]);
  }
}

__global__ void ste_columns_kernel(float* dx, int lddx, const float* dy, int lddy, const float* x, int ldx, int cols,
                                   size_t n, bool clipped) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    dx[r * lddx + c] = ste(dy[r * lddy + c], x[r * ldx + c], clipped);
  }
}

}  // namespace

void gelu_forward(CudaStream s, float* y, const float* x, size_t n) { launch_forward<Gelu>(s, y, x, n); }
void gelu_backward(CudaStream s, float* dx, const float* dy, const float* x, size_t n) {
  launch_backward<Gelu>(s, dx, dy, x, n);
}
void silu_forward(CudaStream s, float* y, const float* x, size_t n) { launch_forward<Silu>(s, y, x, n); }
void silu_backward(CudaStream s, float* dx, const float* dy, const float* x, size_t n) {
  launch_backward<Silu>(s, dx, dy, x, n);
}
void relu2_forward(CudaStream s, float* y, const float* x, size_t n) { launch_forward<Relu2>(s, y, x, n); }
void relu2_backward(CudaStream s, float* dx, const float* dy, const float* x, size_t n) {
  launch_backward<Relu2>(s, dx, dy, x, n);
}
void elu_forward(CudaStream s, float* y, const float* x, size_t n) { launch_forward<Elu>(s, y, x, n); }
void elu_backward(CudaStream s, float* dx, const float* dy, const float* x, size_t n) {
  launch_backward<Elu>(s, dx, dy, x, n);
}

void swiglu_forward(CudaStream stream, float* y, const float* gate_up, int N, int Hd) {
  const size_t n = size_t(N) * Hd;
  if (!n) return;
  swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, gate_up, Hd, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(CudaStream stream, float* dgate_up, const float* dy, const float* gate_up, int N, int Hd) {
  const size_t n = size_t(N) * Hd;
  if (!n) return;
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate_up, dy, gate_up, Hd, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void sign_forward(CudaStream stream, float* y, const float* x, size_t n) { launch_forward<Sign>(stream, y, x, n); }

void sign_ste_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n, bool clipped) {
  if (!n) return;
  ste_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dx, dy, x, n, clipped);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void sign_forward_columns(CudaStream stream, float* y, int ldy, const float* x, int ldx, int rows, int cols) {
  const size_t n = size_t(rows) * cols;
  if (rows <= 0 || cols <= 0) return;
  sign_columns_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, ldy, x, ldx, cols, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void sign_ste_backward_columns(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, const float* x,
                               int ldx, int rows, int cols, bool clipped) {
  const size_t n = size_t(rows) * cols;
  if (rows <= 0 || cols <= 0) return;
  ste_columns_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dx, lddx, dy, lddy, x, ldx, cols, n, clipped);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
