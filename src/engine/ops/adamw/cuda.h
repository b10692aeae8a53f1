#pragma once
// The optimizer on the GPU as fused kernels over the flat parameter buffer (train/adamw.h's semantics): the global
// gradient norm, clipping and AdamW with decoupled weight decay. Everything a step needs from the host (learning
// rate, bias corrections) arrives through a small struct in device memory, so a captured CUDA graph replays the
// update unchanged while the schedule moves on.
//
// Determinism: the squared norm is summed in double, each of kNormBlocks fixed slices of the buffer by one block in
// a fixed tree, then the slices in order by one block: the same bits on every run and every GPU model (not the
// CPU's bits: it sums serially). The update is elementwise.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

// Per-step constants, computed on the host exactly as adamw_step (train/adamw.h) computes them, then copied to
// the device before the step (or the graph) runs.
struct AdamWStep {
  float step_size;  // lr / (1 − β1^t)
  float rbc2;       // 1 / sqrt(1 − β2^t)
  float eps;
  float shrink;     // 1 − lr · weight_decay, applied where the decay mask is 1
  float beta1, beta2;
  double max_norm;  // global-norm clipping threshold; <= 0: no clipping
};

// t: the update's number, counting from 1 (AdamWState::t after the increment)
inline AdamWStep adamw_step_constants(double lr, int64_t t, double beta1, double beta2, double eps,
                                      double weight_decay, double max_norm) {
  const double bc1 = 1.0 - std::pow(beta1, double(t)), bc2 = 1.0 - std::pow(beta2, double(t));
  return {float(lr / bc1), float(1.0 / std::sqrt(bc2)), float(eps), float(1.0 - lr * weight_decay), float(beta1),
          float(beta2), max_norm};
}

// Doubles of scratch grad_sum_squares needs.
size_t grad_norm_scratch_size();

// *sumsq (one device double) = Σ grads[i]², in a fixed order (see above). The norm is sqrt(*sumsq).
void grad_sum_squares(CudaStream stream, double* sumsq, const float* grads, size_t n, double* scratch);

// grads *= min(1, max_norm / (sqrt(*sumsq) + 1e-6)) when max_norm > 0 and that factor is below 1 (each
// gradient scaled in double and rounded once, as clip_grad_norm does). sumsq is a device double.
void clip_grad_norm(CudaStream stream, float* grads, size_t n, const double* sumsq, double max_norm);

// One AdamW update of params (n) with moments m, v (n, zero before the first update), the decay mask (n: 1 where
// weight decay applies) and the constants at `step` (device memory). When sumsq (device) is not null and
// step->max_norm > 0, the gradients are clipped on the fly by the factor clip_grad_norm would apply (grads are not
// modified). When *sumsq is not finite nothing is updated: the host reads the norm, sees it and stops the run with
// the parameters as they were, as the CPU does. params_bf16 (n) or nullptr: also writes the bf16 copy of the new
// parameters that the bf16 GEMMs read.
void adamw_update(CudaStream stream, float* params, float* m, float* v, const float* grads, const uint8_t* decay,
                  size_t n, const AdamWStep* step, const double* sumsq, Bf16* params_bf16);

}  // namespace canonlab::cuda
