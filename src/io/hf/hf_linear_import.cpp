// config.json of PhysicsLM4's GLACanon, GatedDeltaNetCanon and Mamba2Canon -> canonlab's model (import-hf); the
// tables read backwards (docs/huggingface.md). A key canonlab cannot represent is refused with its value.
#include <set>

#include "config/model_shapes.h"
#include "io/hf/hf_keys.h"
#include "io/hf/hf_linear.h"

namespace canonlab {

namespace {

using nlohmann::json;

// The Canon keys every format shares, and canon_set's letters (b set by the family's own conv flag).
void read_canon(const HfKeys& k, ModelConfig& m, const std::string& letters_allowed, bool conv) {
  const std::string set = k.string("canon_set", "");
  std::set<char> seen;
  for (char ch : set)
    if (ch != 'b' && (letters_allowed.find(ch) == std::string::npos || !seen.insert(ch).second))
      k.fail("canon_set", "allowed: distinct letters from " + letters_allowed + " (and b)");
  if (k.boolean("canon_bias", false)) k.fail("canon_bias", "canonlab's Canon layers have no bias; allowed: false");
  std::string ours;
  for (char ch : set)
    if (ch != 'b') ours += ch;
  if (conv) ours += 'b';
  m.canon.set = ours;  // resolve_and_validate orders the letters
  m.canon.residual = k.boolean("canon_residual", true);
  m.canon.activation = k.boolean("canon_activation", false) ? "silu" : "none";
  m.canon.kernel_size = k.integer("canon_kernel", 4, 1, "model.canon.kernel_size");
  m.canon.groups = 0;
  m.canon.norm = "none";
}

// fla's MLP default: 2/3 * hidden_size * hidden_ratio rounded up to a multiple of 256.
int fla_intermediate(const HfKeys& k, int d) {
  if (k.has("intermediate_size")) return k.integer("intermediate_size", std::nullopt, 1, "model.mlp.hidden_dim");
  const int ratio = k.integer("hidden_ratio", 4, 1);
  const auto size = int64_t(double(d) * ratio * 2 / 3.0);  // d * ratio < 2^53: exact, as fla's int(...) in Python
  return k.derived("hidden_ratio", "2/3 * hidden_size * hidden_ratio rounded up to 256", 256 * ((size + 255) / 256),
                   "model.mlp.hidden_dim");
}

void require_null(const HfKeys& k, const std::string& key, const std::string& why) {
  if (k.has(key)) k.fail(key, why + "; allowed: null");
}

void read_gla(const HfKeys& k, ModelConfig& m) {
  m.n_heads = k.integer("num_heads", 4, 1, "model.n_heads");
  if (k.has("num_kv_heads") && k.integer("num_kv_heads", std::nullopt, 1) != m.n_heads)
    k.fail("num_kv_heads", "canonlab's GLA has no grouped keys/values; allowed: null or num_heads");
  m.gla.expand_k = k.number("expand_k", 0.5);
  m.gla.expand_v = k.number("expand_v", 1.0);
  const std::string fm = k.string("feature_map", "none");
  if (fm != "none" && fm != "relu" && fm != "swish" && fm != "silu")
    k.fail("feature_map", "allowed: null, relu, swish, silu");
  m.gla.feature_map = fm == "swish" ? "silu" : fm;
  m.gla.output_gate = k.boolean("use_output_gate", true);
  require_null(k, "output_gate_rank", "canonlab's g_proj is full rank");
  if (k.has("clamp_min")) {
    if (!k.at("clamp_min").is_number() || k.at("clamp_min").get<double>() >= 0)
      k.fail("clamp_min", "canonlab clamps the log forget gate at a negative bound; allowed: null or a number < 0");
    m.gla.clamp_min = k.at("clamp_min").get<double>();
  }
  if (!k.boolean("use_gk", true)) k.fail("use_gk", "canonlab's GLA has the key gate; allowed: true");
  if (k.boolean("use_gv", false)) k.fail("use_gv", "canonlab's GLA has no value gate; allowed: false");
  if (!k.boolean("elementwise_affine", true)) k.fail("elementwise_affine", "canonlab's o_norm has a weight; allowed: true");
  m.gla.gate_low_rank_dim = 16;  // GLABlock keeps the layer defaults
  m.gla.gate_logit_normalizer = 16.0;
  const bool conv = k.boolean("use_short_conv", false);
  if (!conv) k.fail("use_short_conv", "without short convs GLACanon applies SiLU to q, k, v, canonlab's GLA does not; allowed: true");
  read_canon(k, m, "ACD", conv);  // GLACanon's Canon-B stops at assert False
  m.recurrent.conv_kernel = k.integer("conv_size", 4, 1, "model.recurrent.conv_kernel");
  m.norm_eps = k.number("norm_eps", 1e-6);
  m.mlp.hidden_dim = fla_intermediate(k, m.d_model);
}

void read_gdn(const HfKeys& k, ModelConfig& m) {
  m.n_heads = k.integer("num_heads", 6, 1, "model.n_heads");
  // Widths as canonlab's expand_k / expand_v times hidden_size, so they are bounded by those keys' limits; computed
  // in 64 bits and refused under `key` before they become ints.
  const auto width = [&](const std::string& key, const std::string& formula, int64_t value, const std::string& expand) {
    const int64_t limit = int64_t(config_key_upper_limit(expand));
    if (value > limit * m.d_model)
      k.fail(key, formula + " = " + std::to_string(value) + " exceeds canonlab's " + expand + " limit (" +
                      std::to_string(limit) + ") times hidden_size");
    return int(value);
  };
  const int key_width =
      width("head_dim", "num_heads * head_dim", int64_t(m.n_heads) * k.integer("head_dim", 256, 1), "model.delta.expand_k");
  const int ev = k.integer("expand_v", 2, 1);  // theirs: value width = key width * expand_v, a whole number
  const int value_width =
      width("expand_v", "num_heads * head_dim * expand_v", int64_t(key_width) * ev, "model.delta.expand_v");
  // canonlab's widths are int(d_model * expand); the ratios must give them back exactly.
  m.delta.expand_k = double(key_width) / m.d_model;
  m.delta.expand_v = double(value_width) / m.d_model;
  if (qkv_shape(m, 'D').key_width != key_width)
    k.fail("head_dim", "num_heads * head_dim / hidden_size as canonlab's expand_k does not give the key width back");
  if (qkv_shape(m, 'D').value_width != value_width)
    k.fail("expand_v", "key width * expand_v / hidden_size as canonlab's expand_v does not give the value width back");
  m.delta.output_gate = k.boolean("use_gate", true);
  require_null(k, "output_gate_rank", "canonlab's g_proj is full rank");
  m.delta.allow_neg_eigval = false;
  read_canon(k, m, "ABCD", k.boolean("use_short_conv", true));
  m.recurrent.conv_kernel = k.integer("conv_size", 4, 1, "model.recurrent.conv_kernel");
  m.norm_eps = k.number("norm_eps", 1e-6);
  m.mlp.hidden_dim = fla_intermediate(k, m.d_model);
}

void read_mamba2(const HfKeys& k, ModelConfig& m) {
  const int heads = k.integer("num_heads", 128, 1), headdim = k.integer("head_dim", 64, 1, "model.mamba2.headdim");
  m.mamba2.expand = k.integer("expand", 2, 1, "model.mamba2.expand");
  const int64_t d_inner = int64_t(m.mamba2.expand) * m.d_model;
  if (int64_t(heads) * headdim != d_inner)
    k.fail("num_heads", "num_heads * head_dim must be expand * hidden_size = " + std::to_string(d_inner));
  m.n_heads = m.d_model % heads == 0 ? heads : 1;  // unused by Mamba2 layers once headdim is set
  m.mamba2.headdim = headdim;
  m.mamba2.d_state = k.integer("state_size", 128, 1, "model.mamba2.d_state");
  if (k.integer("n_groups", 8, 1) != 1)
    k.fail("n_groups", "their inference-path gated RMSNorm spans all of d_inner, canonlab's d_inner / ngroups; allowed: 1");
  m.mamba2.ngroups = 1;
  if (k.boolean("use_bias", false)) k.fail("use_bias", "canonlab's in_proj and out_proj have no bias; allowed: false");
  if (k.boolean("residual_in_fp32", true))
    k.fail("residual_in_fp32", "Mamba2CanonBlock asserts it is off; allowed: false");
  if (!k.boolean("rms_norm", true)) k.fail("rms_norm", "allowed: true");
  if (k.string("hidden_act", "silu") != "silu") k.fail("hidden_act", "allowed: silu");
  if (k.has("time_step_limit")) k.fail("time_step_limit", "canonlab does not clamp dt; allowed: absent (0, inf)");
  const bool noconv = k.boolean("noconv1d", false);
  if (k.boolean("use_conv_bias", true) == noconv)
    k.fail("use_conv_bias", noconv ? "noconv1d has no conv bias; allowed: false" : "canonlab's conv1d has a bias; allowed: true");
  const std::string mlp = k.string("mlp_type", "");
  if (!mlp.empty() && mlp != "mlp10") k.fail("mlp_type", "allowed: null, mlp10");
  m.mamba2.mlp = !mlp.empty();
  m.mlp.hidden_dim = m.mamba2.mlp ? k.integer("intermediate_size", 2 * m.d_model, 1, "model.mlp.hidden_dim") : 0;
  read_canon(k, m, m.mamba2.mlp ? "ABCD" : "AB", !noconv);
  m.recurrent.conv_kernel = k.integer("conv_kernel", 4, 1, "model.recurrent.conv_kernel");
  m.norm_eps = k.number("layer_norm_epsilon", 1e-5);
  m.mamba2.dt_min = k.number("time_step_min", 1e-3);
  m.mamba2.dt_max = k.number("time_step_max", 0.1);
  m.mamba2.dt_init_floor = k.number("time_step_floor", 1e-4);
  if (k.boolean("tie_word_embeddings", false))
    k.fail("tie_word_embeddings", "Mamba2CanonForCausalLM keeps lm_head separate; allowed: false");
}

}  // namespace

std::optional<HfFormat> hf_linear_format_of(const std::string& model_type) {
  if (model_type == "GLACanon") return HfFormat::gla_canon;
  if (model_type == "GatedDeltaNetCanon") return HfFormat::gdn_canon;
  if (model_type == "Mamba2Canon") return HfFormat::mamba2_canon;
  return std::nullopt;
}

ModelConfig linear_model_config_from_hf(const json& c, const std::string& path, HfFormat f) {
  const HfKeys k(c, path);
  ModelConfig m;
  m.family = f == HfFormat::gla_canon ? "gla" : f == HfFormat::gdn_canon ? "gdn" : "mamba2";
  m.d_model = k.integer("hidden_size", std::nullopt, 1, "model.d_model");
  m.n_layers = k.integer("num_hidden_layers", std::nullopt, 1, "model.n_layers");
  m.vocab_size = k.integer("vocab_size", std::nullopt, 1, "model.vocab_size");
  m.max_seq_len = k.integer("max_position_embeddings", 2048, 1, "model.max_seq_len");
  m.tie_embeddings = k.boolean("tie_word_embeddings", false);
  if (k.has("initializer_range")) m.init_std = k.number("initializer_range", m.init_std);
  m.norm = "rmsnorm";
  m.mlp.kind = "swiglu";
  m.mlp.bias = false;
  if (f != HfFormat::mamba2_canon) {
    require_null(k, "attn", "canonlab's gla and gdn families have no attention layers");
    const std::string act = k.string("hidden_act", "swish");
    if (act != "swish" && act != "silu") k.fail("hidden_act", "canonlab's gated MLP is SwiGLU; allowed: swish, silu");
  }
  if (f == HfFormat::gla_canon) read_gla(k, m);
  else if (f == HfFormat::gdn_canon) read_gdn(k, m);
  else read_mamba2(k, m);
  return m;
}

}  // namespace canonlab
