#include "io/hf/hf_names.h"

#include <array>
#include <utility>

#include "engine/error.h"

namespace canonlab {

namespace {

// Inside a block: ours after "layers.<i>.", theirs after "model.layers.<i>.".
constexpr std::array<std::pair<const char*, const char*>, 20> kLayerNames = {{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"canon_a.weight", "canonA.weight"},
    {"attn.q_proj.weight", "self_attn.q_proj.weight"},
    {"attn.q_proj.bias", "self_attn.q_proj.bias"},
    {"attn.k_proj.weight", "self_attn.k_proj.weight"},
    {"attn.k_proj.bias", "self_attn.k_proj.bias"},
    {"attn.v_proj.weight", "self_attn.v_proj.weight"},
    {"attn.v_proj.bias", "self_attn.v_proj.bias"},
    {"attn.canon_b.weight", "self_attn.canonB.weight"},
    {"attn.o_proj.weight", "self_attn.o_proj.weight"},
    {"attn.o_proj.bias", "self_attn.o_proj.bias"},
    {"mlp_norm.weight", "post_attention_layernorm.weight"},
    {"canon_c.weight", "canonC.weight"},
    {"mlp.gate_proj.weight", "mlp.gate_proj.weight"},
    {"mlp.gate_proj.bias", "mlp.gate_proj.bias"},
    {"mlp.up_proj.weight", "mlp.up_proj.weight"},
    {"mlp.up_proj.bias", "mlp.up_proj.bias"},
    {"mlp.canon_d.weight", "mlp.canonD.weight"},
    {"mlp.down_proj.weight", "mlp.down_proj.weight"},
    {"mlp.down_proj.bias", "mlp.down_proj.bias"},
}};

constexpr std::array<std::pair<const char*, const char*>, 3> kTopNames = {{
    {"tok_emb.weight", "model.embed_tokens.weight"},
    {"final_norm.weight", "model.norm.weight"},
    {"lm_head.weight", "lm_head.weight"},
}};

}  // namespace

std::string hf_tensor_name(const std::string& name) {
  for (const auto& [ours, theirs] : kTopNames)
    if (name == ours) return theirs;
  const std::string prefix = "layers.";
  if (name.starts_with(prefix)) {
    const size_t dot = name.find('.', prefix.size());
    const std::string index = name.substr(prefix.size(), dot == std::string::npos ? 0 : dot - prefix.size());
    const bool digits = !index.empty() && index.find_first_not_of("0123456789") == std::string::npos;
    if (digits) {
      const std::string rest = name.substr(dot + 1);
      for (const auto& [ours, theirs] : kLayerNames)
        if (rest == ours) return "model.layers." + index + "." + theirs;
    }
  }
  throw Error("parameter '" + name + "' has no counterpart in LlamaForCausalLM or LlamaCanon (docs/huggingface.md)");
}

}  // namespace canonlab
