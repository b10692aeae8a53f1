#include "models/transformer.h"

namespace canonlab {

template <class T>
std::unique_ptr<LanguageModel<T>> build_model(const ModelConfig& cfg, uint64_t seed) {
  if (cfg.family == "transformer") return std::make_unique<Transformer<T>>(cfg, seed);
  throw Error("model.family: '" + cfg.family + "' is not built into this version; allowed: transformer");
}

template std::unique_ptr<LanguageModel<float>> build_model<float>(const ModelConfig&, uint64_t);
template std::unique_ptr<LanguageModel<double>> build_model<double>(const ModelConfig&, uint64_t);

}  // namespace canonlab
