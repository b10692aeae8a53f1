#pragma once
// The interface the trainer, evaluators and probes use for every model family.
#include <memory>

#include "config/run_config.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

template <class T>
class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  // tokens: (B, T) -> logits: (B, T, V), allocated in ctx.arena. Saves what backward needs.
  virtual const T* forward(StepContext<T>& ctx, const int* tokens, int B, int Tn) = 0;
  // dlogits: (B, T, V) -> parameter gradients (accumulated into params().grads()).
  virtual void backward(StepContext<T>& ctx, const T* dlogits, int B, int Tn) = 0;
  virtual ParameterStore<T>& params() = 0;
  virtual const ModelConfig& config() const = 0;
  int vocab_size() const { return config().vocab_size; }
};

// Builds the model described by cfg (a resolved config) and draws its initial parameters from `seed`.
template <class T>
std::unique_ptr<LanguageModel<T>> build_model(const ModelConfig& cfg, uint64_t seed);

}  // namespace canonlab
