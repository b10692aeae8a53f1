#include "io/hf/hf_config.h"

#include <optional>
#include <set>
#include <vector>

#include "engine/error.h"
#include "config/model_shapes.h"
#include "io/atomic_file.h"
#include "io/json_read.h"
#include "io/hf/hf_keys.h"
#include "io/hf/hf_linear.h"

namespace canonlab {

namespace {

using nlohmann::json;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

std::string list_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Canon widths by letter (docs/checkpoint-format.md): A and C the residual stream, B concat[q, k, v], D concat[gate, up].
int canon_width(char letter, const ModelConfig& m) {
  switch (letter) {
    case 'A': case 'C': return m.d_model;
    case 'B': return canon_b_width(m, 'A');
    default: return canon_d_width(m);
  }
}

bool partial_rope(const ModelConfig& m) { return m.attention.rope_dim < m.d_model / m.n_heads; }

}  // namespace

const char* hf_format_name(HfFormat f) {
  switch (f) {
    case HfFormat::llama: return "llama";
    case HfFormat::llama_canon: return "LlamaCanon";
    case HfFormat::gla_canon: return "GLACanon";
    case HfFormat::gdn_canon: return "GatedDeltaNetCanon";
    default: return "Mamba2Canon";
  }
}

const char* hf_module_stem(HfFormat f) {
  switch (f) {
    case HfFormat::llama: return nullptr;
    case HfFormat::llama_canon: return "llama_canon";
    case HfFormat::gla_canon: return "gla_canon";
    case HfFormat::gdn_canon: return "gated_deltanet_canon";
    default: return "mamba2_canon";
  }
}

nlohmann::json hf_auto_map(HfFormat f) {
  const char* stem = hf_module_stem(f);
  if (!stem) return nullptr;
  const std::string type = hf_format_name(f);  // the class names start with the model_type
  return {{"AutoConfig", "configuration_" + std::string(stem) + "." + type + "Config"},
          {"AutoModelForCausalLM", "modeling_" + std::string(stem) + "." + type + "ForCausalLM"}};
}

HfFormat hf_export_format(const ModelConfig& m) {
  std::vector<std::string> why;
  const auto refuse = [&](const std::string& key, const std::string& value, const std::string& reason) {
    why.push_back(key + " = " + value + ": " + reason);
  };
  if (m.family != "transformer") {
    const HfFormat f = hf_linear_format(m, why);
    if (!why.empty()) {
      const bool known = m.family == "gla" || m.family == "gdn" || m.family == "mamba2";
      std::string text = "cannot export to Hugging Face (" +
                         (known ? std::string(hf_format_name(f)) + ", PhysicsLM4's format for this family" : "no format") +
                         ", docs/huggingface.md): ";
      for (size_t i = 0; i < why.size(); i++) text += (i ? "; " : "") + why[i];
      throw Error(text);
    }
    return f;
  }
  {
    if (m.norm != "rmsnorm") refuse("model.norm", quoted(m.norm), "both formats use RMSNorm; allowed: rmsnorm");
    const std::string& pos = m.attention.position;
    if (pos == "nope")
      refuse("model.attention.position", quoted(pos),
             "both formats rotate at least part of every head (LlamaCanon's rope_dim null or 0 means full RoPE), so "
             "NoPE has no counterpart; allowed: rope (model.attention.rope_dim for partial RoPE)");
    else if (pos != "rope")
      refuse("model.attention.position", quoted(pos),
             std::string(pos == "alibi" ? "ALiBi" : "learned position embeddings") +
                 " has no counterpart in either format; allowed: rope");
    if (m.attention.scoring != "softmax")
      refuse("model.attention.scoring", quoted(m.attention.scoring),
             "sign-STE (+-1) attention has no counterpart: both formats use softmax attention; allowed: softmax");
    if (!m.attention.key_shift.layers.empty())
      refuse("model.attention.key_shift.layers", list_text(m.attention.key_shift.layers),
             "key shift has no counterpart in either format; allowed: []");
    if (m.mlp.kind != "swiglu")
      refuse("model.mlp.kind", quoted(m.mlp.kind),
             "both formats have the gated SiLU MLP (gate_proj, up_proj, down_proj) only; allowed: swiglu");
    if (!m.canon.cross_layer.layers.empty())
      refuse("model.canon.cross_layer.layers", list_text(m.canon.cross_layer.layers),
             "cross-layer Canon has no counterpart in LlamaCanon; allowed: []");
    if (!m.canon.set.empty()) {
      if (m.canon.norm != "none")
        refuse("model.canon.norm", quoted(m.canon.norm), "LlamaCanon's Canon layers have no norm; allowed: none");
      if (m.canon.activation != "none" && m.canon.activation != "silu")
        refuse("model.canon.activation", quoted(m.canon.activation),
               "LlamaCanon's canon_activation is SiLU or nothing; allowed: none, silu");
      if (m.canon.dynamic != 0)
        refuse("model.canon.dynamic", std::to_string(m.canon.dynamic),
               "LlamaCanon's Canon kernels are static; allowed: 0");
      if (m.canon.groups != 0)
        for (char c : m.canon.set)
          if (m.canon.groups != canon_width(c, m)) {
            refuse("model.canon.groups", std::to_string(m.canon.groups),
                   std::string("LlamaCanon's Canon layers are depthwise (one group per channel), Canon-") + c + " has " +
                       std::to_string(canon_width(c, m)) + " channels; allowed: 0 (depthwise)");
            break;
          }
    }
    const int head_dim = m.d_model / m.n_heads;
    if (pos == "rope" && partial_rope(m)) {
      // Hugging Face sizes the rotary table as int(head_dim * partial_rotary_factor), in double precision like this.
      const double factor = double(m.attention.rope_dim) / head_dim;
      if (int(head_dim * factor) != m.attention.rope_dim)
        refuse("model.attention.rope_dim", std::to_string(m.attention.rope_dim),
               "partial_rotary_factor = rope_dim / head_dim does not give it back as int(head_dim * factor)");
    }
  }
  if (!why.empty()) {
    std::string text = "cannot export to Hugging Face (LlamaForCausalLM or LlamaCanon, docs/huggingface.md): ";
    for (size_t i = 0; i < why.size(); i++) text += (i ? "; " : "") + why[i];
    throw Error(text);
  }
  return m.canon.set.empty() && !partial_rope(m) ? HfFormat::llama : HfFormat::llama_canon;
}

nlohmann::json hf_config_json(const RunConfig& cfg, HfFormat f) {
  if (f != HfFormat::llama && f != HfFormat::llama_canon) return hf_linear_config_json(cfg, f);
  const ModelConfig& m = cfg.model;
  const int head_dim = m.d_model / m.n_heads;
  // The copy task's BOS is id task.vocab; the other tasks have no single start token. No task has an EOS.
  const json bos = cfg.task.name == "copy" ? json(cfg.task.vocab) : json(nullptr);
  json j = {
      {"architectures", {f == HfFormat::llama ? "LlamaForCausalLM" : "LlamaCanonForCausalLM"}},
      {"model_type", hf_format_name(f)},
      {"vocab_size", m.vocab_size},
      {"hidden_size", m.d_model},
      {"intermediate_size", m.mlp.hidden_dim},
      {"num_hidden_layers", m.n_layers},
      {"num_attention_heads", m.n_heads},
      {"num_key_value_heads", attention_kv_heads(m)},  // grouped-query attention: k, v heads
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", m.max_seq_len},
      {"initializer_range", m.init_std},
      {"rms_norm_eps", m.norm_eps},
      // transformers 4.x reads rope_theta, 5.x rope_parameters; both are written so that either loads the folder.
      {"rope_theta", m.attention.rope_base},
      {"rope_scaling", nullptr},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", m.attention.rope_base}}},
      {"attention_bias", m.attention.qkv_bias},
      {"attention_dropout", 0.0},
      {"mlp_bias", m.mlp.bias},
      {"tie_word_embeddings", m.tie_embeddings},
      {"pretraining_tp", 1},
      {"use_cache", true},
      {"dtype", "float32"},
      {"bos_token_id", bos},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
  };
  if (f == HfFormat::llama_canon) {
    j["canon_set"] = m.canon.set;
    j["canon_residual"] = m.canon.residual;
    j["canon_activation"] = m.canon.activation == "silu";
    j["canon_kernel"] = m.canon.kernel_size;
    j["canon_bias"] = false;
    j["qk_norm"] = false;
    j["rope_version"] = "huggingface";  // rotate-half pairs (i, i + rope_dim/2), as canonlab rotates
    if (partial_rope(m)) {
      j["rope_dim"] = m.attention.rope_dim;
      j["partial_rotary_factor"] = double(m.attention.rope_dim) / head_dim;
    } else {
      j["rope_dim"] = nullptr;
    }
    // canonlab's model code, which export writes beside config.json (io/hf/remote_code.h): trust_remote_code loads it.
    j["auto_map"] = hf_auto_map(f);
  }
  return j;
}

nlohmann::json hf_generation_config_json(const RunConfig& cfg) {
  return {{"bos_token_id", cfg.task.name == "copy" ? json(cfg.task.vocab) : json(nullptr)},
          {"eos_token_id", nullptr},
          {"pad_token_id", nullptr},
          {"do_sample", false}};
}


nlohmann::json read_hf_config(const std::string& path) {
  return parse_json(read_text_file(path, 10'000'000, "Hugging Face config"), "Hugging Face config '" + path + "'");
}

ModelConfig model_config_from_hf(const json& c, const std::string& path) {
  if (!c.is_object()) throw Error("Hugging Face config '" + path + "' is not a JSON object");
  const HfKeys k(c, path);
  const std::string type = k.string("model_type", "");
  if (const auto linear = hf_linear_format_of(type)) return linear_model_config_from_hf(c, path, *linear);
  if (type != "llama" && type != "LlamaCanon")
    k.fail("model_type", "canonlab imports LlamaForCausalLM and PhysicsLM4's LlamaCanon, GLACanon, GatedDeltaNetCanon and "
                         "Mamba2Canon; allowed: llama, LlamaCanon, GLACanon, GatedDeltaNetCanon, Mamba2Canon");
  const bool canon = type == "LlamaCanon";

  ModelConfig m;
  m.family = "transformer";
  m.d_model = k.integer("hidden_size", std::nullopt, 1, "model.d_model");
  m.n_layers = k.integer("num_hidden_layers", std::nullopt, 1, "model.n_layers");
  m.n_heads = k.integer("num_attention_heads", std::nullopt, 1, "model.n_heads");
  m.vocab_size = k.integer("vocab_size", std::nullopt, 1, "model.vocab_size");
  m.max_seq_len = k.integer("max_position_embeddings", 2048, 1, "model.max_seq_len");  // LlamaConfig's default
  if (m.d_model % m.n_heads != 0)
    k.fail("hidden_size", "not divisible by num_attention_heads = " + std::to_string(m.n_heads) +
                              "; canonlab's head_dim is hidden_size / num_attention_heads");
  const int head_dim = m.d_model / m.n_heads;
  if (k.has("head_dim") && k.integer("head_dim", std::nullopt, 1) != head_dim)
    k.fail("head_dim", "canonlab's head_dim is hidden_size / num_attention_heads; allowed: null or " +
                           std::to_string(head_dim));
  // Grouped-query attention: Hugging Face's repeat_kv lets query head j read key/value head j / (heads / kv heads), as
  // canonlab's (engine/ops/repeat_heads); null means num_attention_heads.
  m.n_kv_heads = k.integer("num_key_value_heads", m.n_heads, 1, "model.n_kv_heads");
  if (m.n_heads % m.n_kv_heads != 0)
    k.fail("num_key_value_heads", "does not divide num_attention_heads = " + std::to_string(m.n_heads) +
                                      "; allowed: a divisor of num_attention_heads");
  const std::string act = k.string("hidden_act", "silu");
  if (act != "silu" && act != "swish") k.fail("hidden_act", "canonlab's gated MLP is SwiGLU; allowed: silu, swish");
  // LlamaCanon's MLP takes a null intermediate_size as hidden_size * 8 // 3.
  m.mlp.kind = "swiglu";
  m.mlp.hidden_dim = canon && !k.has("intermediate_size")
                         ? k.derived("intermediate_size", "null: hidden_size * 8 // 3", int64_t(m.d_model) * 8 / 3,
                                     "model.mlp.hidden_dim")
                         : k.integer("intermediate_size", std::nullopt, 1, "model.mlp.hidden_dim");
  m.mlp.bias = k.boolean("mlp_bias", false);
  m.attention.qkv_bias = k.boolean("attention_bias", false);  // q, k, v and o, as our qkv_bias
  m.norm = "rmsnorm";
  m.norm_eps = k.number("rms_norm_eps", 1e-6);  // LlamaConfig's default
  m.tie_embeddings = k.boolean("tie_word_embeddings", false);
  if (k.has("initializer_range")) m.init_std = k.number("initializer_range", m.init_std);
  if (k.has("pretraining_tp") && k.integer("pretraining_tp", 1, 1) != 1)
    k.fail("pretraining_tp", "allowed: 1 (a sliced matmul canonlab does not reproduce bit for bit)");

  // RoPE: transformers 5 keeps its parameters in rope_parameters, 4.x in rope_theta / rope_scaling.
  if (k.has("rope_scaling")) k.fail("rope_scaling", "canonlab has plain RoPE only; allowed: null");
  m.attention.position = "rope";
  double theta = k.number("rope_theta", 10000.0);
  std::optional<double> factor;
  if (k.has("partial_rotary_factor")) factor = k.number("partial_rotary_factor", 1.0);
  if (k.has("rope_parameters")) {
    const json& rp = k.at("rope_parameters");
    if (!rp.is_object()) k.fail("rope_parameters", "allowed: an object");
    const HfKeys r(rp, path, "rope_parameters.");
    if (r.string("rope_type", "default") != "default")
      r.fail("rope_type", "canonlab has plain RoPE only; allowed: default");
    for (const auto& [key, v] : rp.items())
      if (key != "rope_type" && key != "rope_theta" && key != "partial_rotary_factor" && !v.is_null())
        k.fail("rope_parameters", "key '" + key + "' has no counterpart in canonlab; allowed: rope_type, rope_theta, partial_rotary_factor");
    const double t = r.number("rope_theta", theta);
    if (k.has("rope_theta") && t != theta)
      k.fail("rope_parameters", "rope_theta " + std::to_string(t) + " differs from the top-level rope_theta");
    theta = t;
    if (r.has("partial_rotary_factor")) factor = r.number("partial_rotary_factor", 1.0);
  }
  m.attention.rope_base = theta;

  if (!canon) {
    if (factor && *factor != 1.0)
      k.fail("partial_rotary_factor", "LlamaForCausalLM rotates whole heads; partial RoPE is LlamaCanon's rope_dim");
    m.attention.rope_dim = 0;  // full
    return m;
  }
  // LlamaCanon (PhysicsLM4 huggingface/configuration_llama_canon.py): its own keys.
  if (k.boolean("qk_norm", false)) k.fail("qk_norm", "canonlab has no q/k norm; allowed: false");
  if (k.boolean("canon_bias", false)) k.fail("canon_bias", "canonlab's Canon layers have no bias; allowed: false");
  if (k.string("rope_version", "huggingface") != "huggingface")
    k.fail("rope_version", "canonlab rotates (i, i + rope_dim/2) pairs; allowed: huggingface");
  int rope_dim = 0;
  if (k.has("rope_dim")) {
    rope_dim = k.integer("rope_dim", std::nullopt, 0);
    if (rope_dim % 2 != 0 || rope_dim > head_dim)
      k.fail("rope_dim", "allowed: null, or an even number up to head_dim " + std::to_string(head_dim));
  }
  if (rope_dim == head_dim) rope_dim = 0;  // theirs: null or 0 = full; ours: 0 = full
  if (factor && *factor != (rope_dim == 0 ? 1.0 : double(rope_dim) / head_dim))
    k.fail("partial_rotary_factor", "must equal rope_dim / head_dim");
  m.attention.rope_dim = rope_dim;
  const std::string set = k.string("canon_set", "");
  std::set<char> seen;
  for (char ch : set)
    if (std::string("ABCD").find(ch) == std::string::npos || !seen.insert(ch).second)
      k.fail("canon_set", "allowed: distinct letters from ABCD (canonlab's Transformer has no Canon-b)");
  m.canon.set = set;
  m.canon.residual = k.boolean("canon_residual", true);
  m.canon.activation = k.boolean("canon_activation", false) ? "silu" : "none";
  m.canon.kernel_size = k.integer("canon_kernel", 4, 1, "model.canon.kernel_size");
  m.canon.groups = 0;
  m.canon.norm = "none";
  return m;
}

}  // namespace canonlab
