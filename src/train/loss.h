#pragma once
// Masked mean cross-entropy: loss = sum_i mask_i * nll_i / sum_i mask_i.
#include <vector>

#include "engine/arena.h"
#include "engine/ops/cross_entropy/cross_entropy.h"

namespace canonlab {

template <class T>
struct LossResult {
  double loss = 0;
  T* dlogits = nullptr;  // (N, V) in the arena; null unless requested
};

// logits: (N, V), targets: (N), mask: (N). With want_grad, also dlogits = d loss / d logits.
template <class T>
LossResult<T> masked_cross_entropy(Arena& arena, const T* logits, const int* targets, const float* mask, int N, int V,
                                   bool want_grad) {
  T* losses = arena.alloc<T>(N);
  cross_entropy_forward(losses, logits, targets, N, V);
  double total = 0, weight = 0;
  for (int i = 0; i < N; i++) {
    if (mask[i] == 0.f) continue;
    total += double(mask[i]) * double(losses[i]);
    weight += mask[i];
  }
  LossResult<T> r;
  r.loss = weight > 0 ? total / weight : 0.0;
  if (want_grad) {
    T* dlosses = arena.alloc<T>(N);
    for (int i = 0; i < N; i++) dlosses[i] = weight > 0 ? T(mask[i] / weight) : T(0);
    r.dlogits = arena.alloc<T>(size_t(N) * V);
    cross_entropy_backward(r.dlogits, logits, targets, dlosses, N, V);
  }
  return r;
}

}  // namespace canonlab
