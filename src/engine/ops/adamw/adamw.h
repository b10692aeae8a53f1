#pragma once
// The optimizer's kernels over the flat parameter buffer (train/adamw.h holds the schedule-side logic): the global
// gradient norm, clipping, one AdamW update, and the scan for the first non-finite value that the non-finite guard
// reports. The norm is one sum in double in index order: the same bits on every run and thread count.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "engine/ops/adamw/coefficients.h"

namespace canonlab {


// Σ g², accumulated in double in index order (the global gradient norm is its square root)
template <class T>
double sum_of_squares(const T* g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += double(g[i]) * double(g[i]);
  return s;
}

// The factor clipping multiplies gradients by (torch.nn.utils.clip_grad_norm_ semantics); 1 = no clipping (also for
// a norm that is not finite: the step guard stops such a run, and nothing is scaled by NaN).
inline double clip_coefficient(double norm, double max_norm) {
  return max_norm <= 0 ? 1.0 : std::min(1.0, max_norm / (norm + 1e-6));
}

// A step's guard (Backend::step_guard): the first step with a non-finite loss or gradient norm, kept once set.
inline void step_guard(int32_t* halted_at, const int32_t* step, const double* values, int n) {
  if (*halted_at >= 0) return;
  for (int i = 0; i < n; i++)
    if (!std::isfinite(values[i])) {
      *halted_at = *step;
      return;
    }
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
