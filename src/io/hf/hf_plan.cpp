#include "io/hf/hf_plan.h"

#include <map>

#include "config/model_shapes.h"
#include "engine/error.h"
#include "io/hf/hf_names.h"

namespace canonlab {

namespace {

using Table = std::map<std::string, std::string>;

// Inside a block, ours after "layers.<i>." -> theirs after "<model>.layers.<i>.". GLACanon and GatedDeltaNetCanon
// call the mixer `attn` and share fla's block names; Mamba2Canon follows Hugging Face's Mamba2.
const Table& gla_layer_names() {
  static const Table t = {
      {"attn_norm.weight", "attn_norm.weight"},
      {"canon_a.weight", "canonA.weight"},
      {"mixer.q_proj.weight", "attn.q_proj.weight"},
      {"mixer.k_proj.weight", "attn.k_proj.weight"},
      {"mixer.v_proj.weight", "attn.v_proj.weight"},
      {"mixer.q_conv.weight", "attn.q_conv1d.weight"},
      {"mixer.k_conv.weight", "attn.k_conv1d.weight"},
      {"mixer.v_conv.weight", "attn.v_conv1d.weight"},
      {"mixer.gk_down.weight", "attn.gk_proj.0.weight"},
      {"mixer.gk_up.weight", "attn.gk_proj.1.weight"},
      {"mixer.gk_up.bias", "attn.gk_proj.1.bias"},
      {"mixer.g_proj.weight", "attn.g_proj.weight"},
      // o_norm.weight depends on the output gate (g_norm_swish_gate or g_norm): see hf_linear_tensor_name
      {"mixer.o_proj.weight", "attn.o_proj.weight"},
      {"mlp_norm.weight", "mlp_norm.weight"},
      {"canon_c.weight", "canonC.weight"},
      {"mlp.canon_d.weight", "mlp.canonD.weight"},
      {"mlp.down_proj.weight", "mlp.down_proj.weight"},
  };
  return t;
}

const Table& gdn_layer_names() {
  static const Table t = {
      {"attn_norm.weight", "attn_norm.weight"},
      {"canon_a.weight", "canonA.weight"},
      {"mixer.q_proj.weight", "attn.q_proj.weight"},
      {"mixer.k_proj.weight", "attn.k_proj.weight"},
      {"mixer.v_proj.weight", "attn.v_proj.weight"},
      {"mixer.q_conv.weight", "attn.q_conv1d.weight"},
      {"mixer.k_conv.weight", "attn.k_conv1d.weight"},
      {"mixer.v_conv.weight", "attn.v_conv1d.weight"},
      {"mixer.canon_b.weight", "attn.canonB.weight"},
      {"mixer.b_proj.weight", "attn.b_proj.weight"},
      {"mixer.a_proj.weight", "attn.a_proj.weight"},
      {"mixer.A_log", "attn.A_log"},
      {"mixer.dt_bias", "attn.dt_bias"},
      {"mixer.g_proj.weight", "attn.g_proj.weight"},
      {"mixer.o_norm.weight", "attn.o_norm.weight"},
      {"mixer.o_proj.weight", "attn.o_proj.weight"},
      {"mlp_norm.weight", "mlp_norm.weight"},
      {"canon_c.weight", "canonC.weight"},
      {"mlp.gate_proj.weight", "mlp.gate_proj.weight"},  // without Canon-D only; with it both_proj (fused)
      {"mlp.up_proj.weight", "mlp.up_proj.weight"},
      {"mlp.canon_d.weight", "mlp.canonD.weight"},
      {"mlp.down_proj.weight", "mlp.down_proj.weight"},
  };
  return t;
}

const Table& mamba2_layer_names() {
  static const Table t = {
      {"attn_norm.weight", "norm.weight"},
      {"canon_a.weight", "canonA.weight"},
      {"mixer.in_proj.weight", "mixer.in_proj.weight"},
      {"mixer.canon_b.weight", "mixer.canonB.weight"},
      {"mixer.conv1d.weight", "mixer.conv1d.weight"},
      {"mixer.conv1d.bias", "mixer.conv1d.bias"},
      {"mixer.dt_bias", "mixer.dt_bias"},
      {"mixer.A_log", "mixer.A_log"},
      {"mixer.D", "mixer.D"},
      {"mixer.norm.weight", "mixer.norm.weight"},
      {"mixer.out_proj.weight", "mixer.out_proj.weight"},
      {"mlp_norm.weight", "pre_mlp_layernorm.weight"},
      {"canon_c.weight", "canonC.weight"},
      {"mlp.canon_d.weight", "mlp.canonD.weight"},
      {"mlp.down_proj.weight", "mlp.down_proj.weight"},
  };
  return t;
}

// The fused MLP matrix's name, or "" where the format keeps gate_proj and up_proj apart.
std::string fused_mlp_name(HfFormat f, const ModelConfig& m) {
  if (f == HfFormat::gla_canon) return "mlp.gate_proj.weight";  // GLACanonMLP: gate_proj is (2 * hidden, d)
  if (f == HfFormat::mamba2_canon) return "mlp.both_proj.weight";
  if (f == HfFormat::gdn_canon && m.canon.set.find('D') != std::string::npos) return "mlp.both_proj.weight";
  return "";
}

// "layers.<i>.<rest>" -> {i, rest}; {"", ""} for any other name.
std::pair<std::string, std::string> split_layer(const std::string& name) {
  const std::string prefix = "layers.";
  if (!name.starts_with(prefix)) return {"", ""};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {"", ""};
  const std::string index = name.substr(prefix.size(), dot - prefix.size());
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) return {"", ""};
  return {index, name.substr(dot + 1)};
}

}  // namespace

std::string hf_linear_tensor_name(HfFormat f, const std::string& name) {
  const bool mamba = f == HfFormat::mamba2_canon;
  const std::string root = mamba ? "backbone" : "model";
  if (name == "tok_emb.weight") return root + ".embeddings.weight";
  if (name == "final_norm.weight") return root + (mamba ? ".norm_f.weight" : ".norm.weight");
  if (name == "lm_head.weight") return "lm_head.weight";
  const auto [index, rest] = split_layer(name);
  if (!index.empty()) {
    const std::string layer = root + ".layers." + index + ".";
    // GLACanon's per-head output norm is fused with the gate when there is one (FusedRMSNormSwishGate).
    if (f == HfFormat::gla_canon && rest == "mixer.o_norm.weight") return layer + "attn.g_norm_swish_gate.weight";
    const Table& t = f == HfFormat::gla_canon ? gla_layer_names() : f == HfFormat::gdn_canon ? gdn_layer_names() : mamba2_layer_names();
    const auto it = t.find(rest);
    if (it != t.end()) return layer + it->second;
  }
  throw Error("parameter '" + name + "' has no counterpart in " + hf_format_name(f) + " (docs/huggingface.md)");
}

std::vector<HfTensorPlan> hf_export_plan(HfFormat f, const ModelConfig& m, const std::vector<ParamInfo>& params) {
  std::vector<HfTensorPlan> plan;
  if (f == HfFormat::llama || f == HfFormat::llama_canon) {
    for (const ParamInfo& p : params) plan.push_back({hf_tensor_name(p.name), {p.name}, p.shape});
    return plan;
  }
  const std::string fused = fused_mlp_name(f, m);
  const std::string root = f == HfFormat::mamba2_canon ? "backbone" : "model";
  const bool conv = m.canon.set.find('b') != std::string::npos;
  for (const ParamInfo& p : params) {
    const auto [index, rest] = split_layer(p.name);
    const std::string layer = root + ".layers." + index + ".";
    if (f == HfFormat::gla_canon && rest == "mixer.o_norm.weight" && !m.gla.output_gate) {
      plan.push_back({layer + "attn.g_norm.weight", {p.name}, p.shape});  // plain RMSNorm without the gate
      continue;
    }
    if (!fused.empty() && rest == "mlp.gate_proj.weight") {
      const std::string up = "layers." + index + ".mlp.up_proj.weight";
      plan.push_back({layer + fused, {p.name, up}, {2 * p.shape.at(0), p.shape.at(1)}});
      continue;
    }
    if (!fused.empty() && rest == "mlp.up_proj.weight") continue;  // written with gate_proj
    plan.push_back({hf_linear_tensor_name(f, p.name), {p.name}, p.shape});
    if (f == HfFormat::mamba2_canon && !conv && rest == "mixer.in_proj.weight") {
      const Mamba2Shape s = mamba2_shape(m);
      plan.push_back({layer + "mixer.conv1d.weight", {}, {s.conv_dim, 1, m.recurrent.conv_kernel}});
    }
  }
  return plan;
}

}  // namespace canonlab
