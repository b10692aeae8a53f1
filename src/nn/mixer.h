#pragma once
// The seam every sequence mixer implements: softmax attention (full or sliding-window), Mamba2, GLA, Gated
// DeltaNet and DeltaNet. A mixer maps the block's normalised input to its residual-branch output; it keeps
// whatever it needs for backward in the step arena.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/capabilities.h"
#include "engine/error.h"
#include "nn/context.h"

namespace canonlab {

// A mixer's recurrent state for token-by-token decoding (conv caches, SSM / linear-attention states).
struct MixerDecodeState {
  virtual ~MixerDecodeState() = default;
};

template <class T>
class SequenceMixer {
 public:
  virtual ~SequenceMixer() = default;
  // x: (B, T, C) -> y: (B, T, C). x must stay alive until backward.
  virtual void forward(StepContext<T>& ctx, T* y, const T* x, int B, int Tn) = 0;
  // dy: (B, T, C) -> dx: (B, T, C) written; parameter gradients accumulate.
  virtual void backward(StepContext<T>& ctx, T* dx, const T* dy, int B, int Tn) = 0;
  // The op groups this mixer needs from the backend (engine/backend/capabilities.h), each with the setting that
  // asks for it; the model checks them before its parameters are allocated.
  virtual void needs(std::vector<OpNeed>& out) const = 0;
  // Called once on the host copy of the initial values (ParameterStore::initial_values) before they are uploaded:
  // inits that relate several tensors (mimetic init). Param::in(values) finds a tensor in it.
  virtual void after_init(std::span<T> values) {}

  // Recurrent decoding, one token per sequence: x, y: (B, C). Outputs equal forward() on the whole prefix. A host
  // reference (its caches are host vectors and it reads the weights directly): host memory only, fp32 weights.
  virtual std::unique_ptr<MixerDecodeState> start_decode(int B) const {
    throw Error("this mixer has no recurrent decode step");
  }
  virtual void decode_step(MixerDecodeState& state, T* y, const T* x, int B) const {
    throw Error("this mixer has no recurrent decode step");
  }
};

}  // namespace canonlab
