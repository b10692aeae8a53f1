// RoPE (cuda.h): one thread per (sequence, position, frequency), which forms the angle once and rotates that
// pair in every head. Adjacent threads take adjacent frequencies, so each head's halves are read coalesced.
#include <cmath>
#include <string>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/rope/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 128;

__global__ void rope_kernel(float* x, int ld, int Tn, int H, int D, int rope_dim, double base, double direction,
                            size_t n) {
  const int half = rope_dim / 2;
  for (size_t item = blockIdx.x * size_t(blockDim.x) + threadIdx.x; item < n; item += size_t(gridDim.x) * blockDim.x) {
    const int i = int(item % half);
    const size_t bt = item / half;  // b · Tn + t
    const int t = int(bt % Tn);
    const double angle = double(t) * pow(base, -2.0 * double(i) / double(rope_dim));
    const float cs = float(cos(angle)), sn = float(direction * sin(angle));
    float* row = x + bt * size_t(ld);
    for (int h = 0; h < H; h++) {
      float* x1 = row + size_t(h) * D + i;
      float* x2 = x1 + half;
      const float a = *x1, c = *x2;
      *x1 = a * cs - c * sn;
      *x2 = c * cs + a * sn;
    }
  }
}

void rope_rotate(CudaStream stream, float* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base,
                 double direction) {
  CANONLAB_CHECK(rope_dim % 2 == 0 && rope_dim >= 0 && rope_dim <= D,
                 "rope: rope_dim must be even and <= head dim, got rope_dim=" + std::to_string(rope_dim) +
                     " with head dim " + std::to_string(D));
  const int half = rope_dim / 2;
  const size_t n = size_t(B) * Tn * half;
  if (n == 0) return;
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, ld, Tn, H, D, rope_dim, base, direction, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(CudaStream stream, float* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base) {
  rope_rotate(stream, x, ld, B, Tn, H, D, rope_dim, base, 1.0);
}

void rope_backward(CudaStream stream, float* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base) {
  rope_rotate(stream, dx, ld, B, Tn, H, D, rope_dim, base, -1.0);
}

}  // namespace canonlab::cuda
