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
#include "engine/ops/adamw/coefficients.h"

namespace canonlab::cuda {

// Fixed slices of the buffer, one block each: the order of the sum depends on n alone.
inline constexpr int kNormBlocks = 1024;
// Doubles of scratch grad_sum_squares needs.
inline size_t grad_norm_scratch_size() { return kNormBlocks; }

// *sumsq (one device double) = Σ grads[i]², in a fixed order (see above). The norm is sqrt(*sumsq).
void grad_sum_squares(CudaStream stream, double* sumsq, const float* grads, size_t n, double* scratch);

// grads *= min(1, max_norm / (sqrt(*sumsq) + 1e-6)) when max_norm > 0 and that factor is below 1 (each
// gradient scaled in double and rounded once, as clip_grad_norm does). sumsq is a device double.
void clip_grad_norm(CudaStream stream, float* grads, size_t n, const double* sumsq, double max_norm);

// The step guard (Backend::step_guard): *halted_at = *step when it is still < 0 and one of values[0..n) is not
// finite (all device memory; one thread)
void step_guard(CudaStream stream, int32_t* halted_at, const int32_t* step, const double* values, int n);
// One AdamW update of params (n) with moments m, v (n, zero before the first update), the decay mask (n: 1 where
// weight decay applies) and the step's coefficients c (device memory, computed on the host by adamw_coefficients, so
// a captured graph replays the update unchanged while the schedule moves on). Nothing is updated while *halted_at
// >= 0 (the guard stopped the run: the host reads it and reports the step). params_bf16 (n) or nullptr: also writes
// the bf16 copy of the new parameters.
void adamw_update(CudaStream stream, float* params, float* m, float* v, const float* grads, const uint8_t* decay,
                  size_t n, const AdamWCoefficients* c, const int32_t* halted_at, Bf16* params_bf16);
}  // namespace canonlab::cuda
