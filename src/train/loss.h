#pragma once
// Masked mean cross-entropy: loss = sum_i mask_i * nll_i / sum_i mask_i, on the step's backend
// (engine/ops/cross_entropy/masked.h); its scratch and dlogits come from the step's arena.
#include "nn/context.h"

namespace canonlab {

template <class T>
struct LossResult {
  double loss = 0;
  T* dlogits = nullptr;  // (N, V) in the arena; null unless requested
};

// logits: (N, V), targets: (N), mask: (N), all in the step's device memory. With want_grad, also
// dlogits = d loss / d logits. denominator > 0 divides by it instead of Σ mask (a micro-batch of a larger batch).
template <class T>
LossResult<T> masked_cross_entropy(StepContext<T>& ctx, const T* logits, const int* targets, const float* mask, int N,
                                   int V, bool want_grad, double denominator = 0) {
  T* losses = ctx.arena.template alloc<T>(N);
  T* dlosses = want_grad ? ctx.arena.template alloc<T>(N) : nullptr;
  T* dlogits = want_grad ? ctx.arena.template alloc<T>(size_t(N) * V) : nullptr;
  LossResult<T> r;
  r.loss = ctx.backend.masked_cross_entropy(losses, dlosses, dlogits, logits, targets, mask, N, V, denominator);
  r.dlogits = dlogits;
  return r;
}

}  // namespace canonlab
