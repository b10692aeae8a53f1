#pragma once
// The optimizer's kernels over the flat parameter buffer (train/adamw.h holds the schedule-side logic): the global
// gradient norm, clipping, one AdamW update, and the scan for the first non-finite value that the non-finite guard
// reports. The norm is one sum in double in index order: the same bits on every run and thread count.
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace canonlab {

// The per-step scalars of an AdamW update, computed once on the host (train/adamw.h).
struct AdamWCoefficients {
  float beta1, beta2;
  float step;           // lr / (1 − beta1^t)
  float rsqrt_bc2;      // 1 / sqrt(1 − beta2^t)
  float eps;
  float decay_shrink;   // 1 − lr · weight_decay
};

// sqrt(Σ g²), accumulated in double in index order
template <class T>
double global_norm(const T* g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += double(g[i]) * double(g[i]);
  return std::sqrt(s);
}

// One AdamW step (PyTorch semantics, decoupled weight decay where decay[i] != 0); m, v: float moments.
template <class T>
void adamw_update(T* params, const T* grads, float* m, float* v, const uint8_t* decay, size_t n,
                  const AdamWCoefficients& c) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = float(grads[i]);
    float p = float(params[i]);
    if (decay[i]) p *= c.decay_shrink;
    const float mi = c.beta1 * m[i] + (1.f - c.beta1) * g;
    const float vi = c.beta2 * v[i] + (1.f - c.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p -= c.step * mi / (std::sqrt(vi) * c.rsqrt_bc2 + c.eps);
    params[i] = T(p);
  }
}

// The index of the first NaN or infinity in x, or n when every value is finite
template <class T>
size_t first_non_finite(const T* x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!std::isfinite(x[i])) return i;
  return n;
}

}  // namespace canonlab
