#pragma once
// The interface the trainer, evaluators and probes use for every model family.
#include <memory>

#include "config/run_config.h"
#include "engine/backend/backend.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

template <class T>
class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  // tokens: (B, T) -> logits: (B, T, V), allocated in ctx.arena. Saves what backward needs. Both in the memory of
  // backend() (StepContext::upload puts host tokens there).
  virtual const T* forward(StepContext<T>& ctx, const int* tokens, int B, int Tn) = 0;
  // dlogits: (B, T, V) -> parameter gradients (accumulated into params().grads()).
  virtual void backward(StepContext<T>& ctx, const T* dlogits, int B, int Tn) = 0;
  virtual ParameterStore<T>& params() = 0;
  // The backend whose ops the model runs and whose memory holds its parameters.
  virtual Backend<T>& backend() = 0;
  virtual const ModelConfig& config() const = 0;
  int vocab_size() const { return config().vocab_size; }
};

// Builds the model described by cfg (a resolved config) and draws its initial parameters from `seed` on the host;
// they are uploaded to the backend's memory. Without a backend: the CPU backend in fp32.
template <class T>
std::unique_ptr<LanguageModel<T>> build_model(const ModelConfig& cfg, uint64_t seed,
                                              std::shared_ptr<Backend<T>> backend = nullptr);
// The run's model: the backend of train.device and train.precision (engine/backend/make_backend.h).
std::unique_ptr<LanguageModel<float>> build_model(const RunConfig& cfg);

}  // namespace canonlab
