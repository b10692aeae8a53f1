#pragma once
// The seam every sequence mixer implements (softmax attention today; Mamba2, GLA, DeltaNet later).
// A mixer maps the block's normalised input to its residual-branch output; it keeps whatever it needs for
// backward in the step arena.
#include "nn/context.h"

namespace canonlab {

template <class T>
class SequenceMixer {
 public:
  virtual ~SequenceMixer() = default;
  // x: (B, T, C) -> y: (B, T, C). x must stay alive until backward.
  virtual void forward(StepContext<T>& ctx, T* y, const T* x, int B, int Tn) = 0;
  // dy: (B, T, C) -> dx: (B, T, C) written; parameter gradients accumulate.
  virtual void backward(StepContext<T>& ctx, T* dx, const T* dy, int B, int Tn) = 0;
};

}  // namespace canonlab
