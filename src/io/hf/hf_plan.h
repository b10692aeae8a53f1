#pragma once
// Which tensors an export writes and where each one's values come from (docs/huggingface.md has the tables).
//   llama, LlamaCanon: one canonlab parameter per tensor under its other name (hf_names.h).
//   GLACanon, GatedDeltaNetCanon, Mamba2Canon: the same, except
//     - the MLP's gate_proj and up_proj are one fused (2 * hidden, d) matrix where the format fuses them (GLACanon's
//       gate_proj always, Mamba2Canon's both_proj always, GatedDeltaNetCanon's both_proj with Canon-D): the rows of
//       gate_proj, then those of up_proj, bytes unchanged;
//     - Mamba2Canon without Canon-b still holds mixer.conv1d.weight, which its forward replaces with the identity
//       kernel (noconv1d): it is written as zeros, as the format initializes it.
#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/params.h"
#include "io/hf/hf_config.h"

namespace canonlab {

struct HfTensorPlan {
  std::string name;                  // the tensor's name in the format
  std::vector<std::string> sources;  // canonlab parameters concatenated along dim 0, in order; empty: zeros
  std::vector<int64_t> shape;
};

// The tensors of format `f` for a model `m` whose parameters are `params` (registration order). Throws
// canonlab::Error naming a parameter with no counterpart in the format.
std::vector<HfTensorPlan> hf_export_plan(HfFormat f, const ModelConfig& m, const std::vector<ParamInfo>& params);

// A linear family's tensor name in format f: "layers.2.mixer.A_log" -> "backbone.layers.2.mixer.A_log". The MLP's
// gate_proj/up_proj are not named here when the format fuses them (hf_export_plan does that).
std::string hf_linear_tensor_name(HfFormat f, const std::string& canonlab_name);

}  // namespace canonlab
