#include "engine/backend/cpu_backend.h"
#include "engine/backend/make_backend.h"
#include "models/decoder_model.h"

namespace canonlab {

template <class T>
std::unique_ptr<LanguageModel<T>> build_model(const ModelConfig& cfg, uint64_t seed,
                                              std::shared_ptr<Backend<T>> backend) {
  if (!backend) backend = std::make_shared<CpuBackend<T>>();
  // The family is validated with the config; every family is the same decoder with different mixers.
  return std::make_unique<DecoderModel<T>>(cfg, seed, std::move(backend));
}

std::unique_ptr<LanguageModel<float>> build_model(const RunConfig& cfg) {
  return build_model<float>(cfg.model, cfg.train.seed, make_backend(cfg.train));
}

template std::unique_ptr<LanguageModel<float>> build_model<float>(const ModelConfig&, uint64_t,
                                                                  std::shared_ptr<Backend<float>>);
template std::unique_ptr<LanguageModel<double>> build_model<double>(const ModelConfig&, uint64_t,
                                                                    std::shared_ptr<Backend<double>>);

}  // namespace canonlab
