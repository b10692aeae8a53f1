#pragma once
// The activations' scalar formulas on the device (activation.h's, with CUDA's full-precision expf, erfcf and
// expm1f), shared by the elementwise kernels and the fused Canon kernels. Included by .cu files only.
#include <cuda_runtime.h>

namespace canonlab::cuda::detail {

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

struct Gelu {
  __device__ static float forward(float x) { return x * (0.5f * erfcf(-x * 0.70710678118654752440f)); }
  __device__ static float backward(float dy, float x) {
    const float cdf = 0.5f * erfcf(-x * 0.70710678118654752440f);
    const float pdf = 0.39894228040143267794f * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};
struct Silu {
  __device__ static float forward(float x) { return x * sigmoid(x); }
  __device__ static float backward(float dy, float x) {
    const float s = sigmoid(x);
    return dy * s * (1.f + x * (1.f - s));
  }
};
struct Relu2 {
  __device__ static float forward(float x) {
    const float r = x > 0.f ? x : 0.f;
    return r * r;
  }
  __device__ static float backward(float dy, float x) { return x > 0.f ? 2.f * x * dy : 0.f; }
};
// alpha = 1
struct Elu {
  __device__ static float forward(float x) { return x > 0.f ? x : expm1f(x); }
  __device__ static float backward(float dy, float x) { return x > 0.f ? dy : dy * expf(x); }
};
// sign(0) = +1, NaN stays NaN
struct Sign {
  __device__ static float forward(float x) { return x >= 0.f ? 1.f : (x < 0.f ? -1.f : x); }
};

}  // namespace canonlab::cuda::detail
