#pragma once
// canonlab's linear-time families against PhysicsLM4's Hugging Face formats for them (lingua_modified/huggingface/
// configuration_*_canon.py and modeling_*_canon.py, docs/huggingface.md):
//   model.family gla     -> GLACanonForCausalLM           (model_type "GLACanon")
//   model.family gdn     -> GatedDeltaNetCanonForCausalLM (model_type "GatedDeltaNetCanon")
//   model.family mamba2  -> Mamba2CanonForCausalLM        (model_type "Mamba2Canon")
// Options with no exact counterpart are refused, never approximated, both ways.
#include <optional>
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

// The linear format a config.json's model_type names, if any.
std::optional<HfFormat> hf_linear_format_of(const std::string& model_type);
// The canonlab model (unresolved) of a GLACanon / GatedDeltaNetCanon / Mamba2Canon config.json; `path` names the file
// in errors, which give the key, its value and what is allowed (hf_linear_import.cpp).
ModelConfig linear_model_config_from_hf(const nlohmann::json& config, const std::string& path, HfFormat f);

}  // namespace canonlab
