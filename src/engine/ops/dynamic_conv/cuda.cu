// Dynamic Canon's per-position kernel term (cuda.h). Plain grid-stride kernels: one output element per thread,
// its K taps summed in ascending order in a float accumulator and added once (as fast.h does), so a zero delta
// adds exactly zero.
#include <string>

#include "engine/cuda/device_utils.cuh"
#include "engine/error.h"
#include "engine/ops/dynamic_conv/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;

// e = (b·Tn + t)·C + c
__global__ void dynamic_conv_forward_kernel(float* out, const float* in, const float* delta, int Tn, int C, int K,
                                            size_t n) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int c = int(e % C), t = int((e / C) % Tn);
    const size_t seq = e / (size_t(C) * Tn) * Tn;  // first row of this sequence
    const float* d = delta + e * K;
    float acc = 0.f;
    for (int i = max(0, K - 1 - t); i < K; i++) acc += d[i] * in[(seq + (t - (K - 1) + i)) * C + c];
    out[e] += acc;
  }
}

// e = (b·Tn + s)·C + c: din at s from the later tokens t = s + (K−1) − i that read it
__global__ void dynamic_conv_din_kernel(float* din, const float* dout, const float* delta, int Tn, int C, int K,
                                        size_t n) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int c = int(e % C), s = int((e / C) % Tn);
    const size_t seq = e / (size_t(C) * Tn) * Tn;
    float acc = 0.f;
    for (int i = max(0, s + (K - 1) - (Tn - 1)); i < K; i++) {
      const size_t trow = seq + size_t(s + (K - 1) - i);
      acc += delta[(trow * C + c) * K + i] * dout[trow * C + c];
    }
    din[e] += acc;
  }
}

// e = ((b·Tn + t)·C + c)·K + i
__global__ void dynamic_conv_ddelta_kernel(float* ddelta, const float* dout, const float* in, int Tn, int C, int K,
                                           size_t n) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int i = int(e % K);
    const size_t tc = e / K;  // (b·Tn + t)·C + c
    const int c = int(tc % C), t = int((tc / C) % Tn);
    const size_t seq = tc / (size_t(C) * Tn) * Tn;
    const int src = t - (K - 1) + i;
    ddelta[e] = src < 0 ? 0.f : dout[tc] * in[(seq + src) * C + c];
  }
}

void check_shape(int C, int K) {
  CANONLAB_CHECK(C > 0 && K > 0, "dynamic_conv: C = " + std::to_string(C) + " and K = " + std::to_string(K) +
                                     " must be positive");
}

}  // namespace

void dynamic_conv_forward(CudaStream stream, float* out, const float* in, const float* delta, int B, int Tn, int C,
                          int K) {
  check_shape(C, K);
  const size_t n = size_t(B) * Tn * C;
  if (!n) return;
  dynamic_conv_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, native(stream)>>>(out, in, delta, Tn, C, K, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

void dynamic_conv_backward(CudaStream stream, float* din, float* ddelta, const float* dout, const float* in,
                           const float* delta, int B, int Tn, int C, int K) {
  check_shape(C, K);
  const size_t n = size_t(B) * Tn * C;
  if (!n) return;
  dynamic_conv_din_kernel<<<grid_for(n, kThreads), kThreads, 0, native(stream)>>>(din, dout, delta, Tn, C, K, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
  const size_t nd = n * size_t(K);
  dynamic_conv_ddelta_kernel<<<grid_for(nd, kThreads), kThreads, 0, native(stream)>>>(ddelta, dout, in, Tn, C, K,
                                                                                        nd);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
