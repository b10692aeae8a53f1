#pragma once
// The training loss: masked mean cross-entropy, loss = Σ_i mask_i · nll_i / Σ_i mask_i, and its gradient.
// The two sums run in double in row order (the same bits on every run); the rows' softmax work is
// cross_entropy_forward / cross_entropy_backward.
#include <cstddef>

#include "engine/ops/cross_entropy/cross_entropy.h"

namespace canonlab {

// logits: (N, V), targets, mask: (N). losses: (N) written (scratch). With dlogits non-null also dlosses: (N)
// (scratch) and dlogits: (N, V) = d loss / d logits. Returns the loss (0 when the mask is all zero).
// denominator > 0 replaces Σ mask: a micro-batch of a larger batch divides by the whole batch's mask sum, so that
// the micro-batches' losses and gradients add up to the whole batch's (train.micro_batches, data parallelism).
template <class T>
double masked_cross_entropy(T* losses, T* dlosses, T* dlogits, const T* logits, const int* targets, const float* mask,
                            int N, int V, double denominator = 0) {
  cross_entropy_forward(losses, logits, targets, N, V);
  double total = 0, weight = 0;
  for (int i = 0; i < N; i++) {
    if (mask[i] == 0.f) continue;
    total += double(mask[i]) * double(losses[i]);
    weight += mask[i];
  }
  if (denominator > 0) weight = denominator;
  if (dlogits) {
    for (int i = 0; i < N; i++) dlosses[i] = weight > 0 ? T(mask[i] / weight) : T(0);
    cross_entropy_backward(dlogits, logits, targets, dlosses, N, V);
  }
  return weight > 0 ? total / weight : 0.0;
}

}  // namespace canonlab
