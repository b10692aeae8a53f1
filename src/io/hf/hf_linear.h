#pragma once
// canonlab's linear-time families against PhysicsLM4's Hugging Face formats for them (lingua_modified/huggingface/
// configuration_*_canon.py and modeling_*_canon.py, docs/huggingface.md):
//   model.family gla     -> GLACanonForCausalLM           (model_type "GLACanon")
//   model.family gdn     -> GatedDeltaNetCanonForCausalLM (model_type "GatedDeltaNetCanon")
//   model.family mamba2  -> Mamba2CanonForCausalLM        (model_type "Mamba2Canon")
// Export only. Options with no exact counterpart in the format are refused, never approximated.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "io/hf/hf_config.h"

namespace canonlab {

// The format of a linear family (gla, gdn, mamba2); deltanet, hybrid and anything else add a refusal to `why`
// and give gla_canon (never used then). Every setting of `m` without a counterpart adds one
// "our.key = value: reason; allowed: ..." line to `why`.
HfFormat hf_linear_format(const ModelConfig& m, std::vector<std::string>& why);

// config.json of a model hf_linear_format accepted.
nlohmann::json hf_linear_config_json(const RunConfig& cfg, HfFormat f);

}  // namespace canonlab
