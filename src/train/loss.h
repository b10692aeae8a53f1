#pragma once
// Masked mean cross-entropy: loss = sum_i mask_i * nll_i / sum_i mask_i, on the step's backend
// (engine/ops/cross_entropy/masked.h); its scratch and dlogits come from the step's arena.
#include "nn/context.h"

namespace canonlab {

template <class T>
struct LossResult {
  T* dlogits = nullptr;  // (N, V) in the arena; null unless requested
};

// logits: (N, V), targets: (N), mask: (N), all in the step's device memory. *loss (a device double) = the loss. With
// want_grad, also dlogits = d loss / d logits. denominator: a device double that divides instead of Σ mask when > 0
// (a micro-batch of a larger batch), or null.
template <class T>
LossResult<T> masked_cross_entropy(StepContext<T>& ctx, const T* logits, const int* targets, const float* mask, int N,
                                   int V, bool want_grad, const double* denominator, double* loss) {
  T* losses = ctx.arena.template alloc<T>(N);
  T* dlosses = want_grad ? ctx.arena.template alloc<T>(N) : nullptr;
  T* dlogits = want_grad ? ctx.arena.template alloc<T>(size_t(N) * V) : nullptr;
  ctx.backend.masked_cross_entropy(losses, dlosses, dlogits, logits, targets, mask, N, V, denominator, loss);
  return {dlogits};
}

// The same with the loss read back to the host (evaluation, tests): one double of the arena holds it.
template <class T>
double masked_cross_entropy_value(StepContext<T>& ctx, const T* logits, const int* targets, const float* mask, int N,
                                  int V) {
  double* loss = ctx.arena.template alloc<double>(1);
  masked_cross_entropy(ctx, logits, targets, mask, N, V, false, nullptr, loss);
  double value = 0;
  ctx.arena.memory().copy_to_host(&value, loss, sizeof value);
  return value;
}

}  // namespace canonlab
