#pragma once
// The interface the trainer, evaluators and probes use for every model family.
#include <memory>
#include <string>

#include "config/run_config.h"
#include "engine/backend/backend.h"
#include "engine/error.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

// A model's state for token-by-token decoding (LanguageModel::start_decode): every layer's caches, on the host.
struct ModelDecodeState {
  virtual ~ModelDecodeState() = default;
};

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

  // Recurrent decoding, one token per row and step: decode_step(tokens (B), logits (B, V)) gives the logits forward()
  // gives at the next position of each row's sequence so far, in linear time (KV caches, conv caches, SSM and
  // linear-attention states). A host path: host memory only (see recurrent_decode_unavailable).
  // Why this model cannot decode recurrently, or "" when it can.
  virtual std::string recurrent_decode_unavailable() const { return "this model has no recurrent decode step"; }
  virtual std::unique_ptr<ModelDecodeState> start_decode(int B) const {
    throw Error(recurrent_decode_unavailable());
  }
  virtual void decode_step(ModelDecodeState& state, const int* tokens, T* logits, int B) const {
    (void)state, (void)tokens, (void)logits, (void)B;
    throw Error(recurrent_decode_unavailable());
  }
};

// Builds the model described by cfg (a resolved config) and draws its initial parameters from `seed` on the host;
// they are uploaded to the backend's memory. Without a backend: the CPU backend in fp32.
template <class T>
std::unique_ptr<LanguageModel<T>> build_model(const ModelConfig& cfg, uint64_t seed,
                                              std::shared_ptr<Backend<T>> backend = nullptr);
// The run's model: the backend of train.device and train.precision (engine/backend/make_backend.h).
std::unique_ptr<LanguageModel<float>> build_model(const RunConfig& cfg);

}  // namespace canonlab
