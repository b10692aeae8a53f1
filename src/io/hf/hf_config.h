#pragma once
// The model part of a canonlab config against a Hugging Face config.json, both ways (docs/huggingface.md):
//   LlamaForCausalLM (model_type "llama")       a Transformer with full RoPE, RMSNorm, SwiGLU, softmax attention
//   LlamaCanonForCausalLM ("LlamaCanon")        the same plus Canon-ABCD and partial RoPE, PhysicsLM4's format
//   GLACanon, GatedDeltaNetCanon, Mamba2Canon    PhysicsLM4's linear-family formats (export only; io/hf/hf_linear.h)
// Anything that neither format can state exactly is refused, never approximated: the error names our key (export)
// or their key (import), its value, and what is allowed.
#include <string>

#include <nlohmann/json.hpp>

#include "config/run_config.h"

namespace canonlab {

enum class HfFormat { llama, llama_canon, gla_canon, gdn_canon, mamba2_canon };
// The model_type written: "llama", "LlamaCanon", "GLACanon", "GatedDeltaNetCanon" or "Mamba2Canon".
const char* hf_format_name(HfFormat f);
// The module stem of a Canon format's model code (configuration_<stem>.py, modeling_<stem>.py; io/hf/remote_code.h):
// "llama_canon", "gla_canon", "gated_deltanet_canon", "mamba2_canon"; nullptr for stock llama.
const char* hf_module_stem(HfFormat f);
// config.json's auto_map for format `f`: {"AutoConfig": "configuration_<stem>.<Type>Config", "AutoModelForCausalLM":
// "modeling_<stem>.<Type>ForCausalLM"}; null for stock llama, which transformers implements itself.
nlohmann::json hf_auto_map(HfFormat f);

// Which format `model` exports to: for the transformer family llama without Canon and with full RoPE, LlamaCanon
// otherwise; for gla, gdn and mamba2 their PhysicsLM4 format (hf_linear_format lists what they cannot state). Throws one
// canonlab::Error listing every setting of `model` that has no counterpart ("model.attention.key_shift.layers =
// [0]: ..."). `model` must be resolved (rope_dim, mlp.hidden_dim filled in).
HfFormat hf_export_format(const ModelConfig& model);

// config.json for `cfg` in format `f` (cfg.task supplies the BOS token of the copy task).
nlohmann::json hf_config_json(const RunConfig& cfg, HfFormat f);
// generation_config.json: greedy decoding, the copy task's BOS, no EOS (our tasks have none).
nlohmann::json hf_generation_config_json(const RunConfig& cfg);

// A folder's config.json as JSON: a regular file of at most 10 MB, nesting limited at parse time (io/json_read.h);
// errors name `path`.
nlohmann::json read_hf_config(const std::string& path);

// The canonlab model a Hugging Face config.json describes (unresolved: vocab_size and max_seq_len set, rope_dim 0 for
// full RoPE). `path` names the file in errors; a key canonlab cannot represent is refused with its value.
ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path);

}  // namespace canonlab
