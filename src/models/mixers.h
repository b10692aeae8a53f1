#pragma once
// Builds the mixer of one layer from its letter (config/model_shapes.h): A attention, S sliding-window attention,
// M Mamba2, G GLA, D Gated DeltaNet, N DeltaNet. Attention layers are named `attn`, the others `mixer`, so a
// Transformer checkpoint keeps the names it always had.
#include <memory>
#include <string>

#include "config/model_shapes.h"
#include "nn/attention.h"
#include "nn/delta_net.h"
#include "nn/gla.h"
#include "nn/mamba2.h"

namespace canonlab {

template <class T>
std::unique_ptr<SequenceMixer<T>> make_mixer(ParameterStore<T>& store, const std::string& layer_name, int layer,
                                             char letter, const ModelConfig& cfg) {
  switch (letter) {
    case 'A': return std::make_unique<Attention<T>>(store, layer_name + ".attn", layer, cfg);
    case 'S': return std::make_unique<Attention<T>>(store, layer_name + ".attn", layer, cfg, cfg.attention.window);
    case 'M': return std::make_unique<Mamba2Mixer<T>>(store, layer_name + ".mixer", cfg);
    case 'G': return std::make_unique<GlaMixer<T>>(store, layer_name + ".mixer", cfg);
    case 'D': return std::make_unique<DeltaNetMixer<T>>(store, layer_name + ".mixer", cfg, true);
    case 'N': return std::make_unique<DeltaNetMixer<T>>(store, layer_name + ".mixer", cfg, false);
  }
  throw Error(std::string("model.layer_pattern: unknown mixer letter '") + letter + "'");
}

}  // namespace canonlab
