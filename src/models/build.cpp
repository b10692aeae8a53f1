#include "models/decoder_model.h"

namespace canonlab {

template <class T>
std::unique_ptr<LanguageModel<T>> build_model(const ModelConfig& cfg, uint64_t seed) {
  // The family is validated with the config; every family is the same decoder with different mixers.
  return std::make_unique<DecoderModel<T>>(cfg, seed);
}

template std::unique_ptr<LanguageModel<float>> build_model<float>(const ModelConfig&, uint64_t);
template std::unique_ptr<LanguageModel<double>> build_model<double>(const ModelConfig&, uint64_t);

}  // namespace canonlab
