#include "io/hf/hf_linear.h"

#include "config/model_shapes.h"

namespace canonlab {

namespace {

using nlohmann::json;

std::string quoted(const std::string& s) { return "'" + s + "'"; }
std::string number(double v) { return json(v).dump(); }
std::string list_text(const std::vector<int>& v) { return json(v).dump(); }
bool has(const std::string& set, char c) { return set.find(c) != std::string::npos; }

struct Refusals {
  std::vector<std::string>& why;
  void operator()(const std::string& key, const std::string& value, const std::string& reason) const {
    why.push_back(key + " = " + value + ": " + reason);
  }
};

// Options every one of the three formats shares: RMSNorm blocks, a gated SiLU MLP without biases, and PhysicsLM4's
// create_canon (depthwise causal conv, optional SiLU, optional residual, no norm, static kernel, no cross-layer link).
void check_shared(const ModelConfig& m, const char* fmt, bool has_mlp, const Refusals& refuse) {
  if (m.norm != "rmsnorm") refuse("model.norm", quoted(m.norm), std::string(fmt) + " uses RMSNorm; allowed: rmsnorm");
  if (m.attention.position == "learned")
    refuse("model.attention.position", quoted("learned"),
           std::string(fmt) + " has no position embedding table; allowed: rope, nope, alibi (unused by this family)");
  if (has_mlp && m.mlp.kind != "swiglu")
    refuse("model.mlp.kind", quoted(m.mlp.kind), std::string(fmt) + "'s MLP is the gated SiLU one; allowed: swiglu");
  if (has_mlp && m.mlp.bias) refuse("model.mlp.bias", "true", std::string(fmt) + "'s MLP has no biases; allowed: false");
  if (!m.canon.cross_layer.layers.empty())
    refuse("model.canon.cross_layer.layers", list_text(m.canon.cross_layer.layers), std::string(fmt) + " has no cross-layer Canon; allowed: []");
  const std::string letters = m.canon.set;
  if (letters.find_first_of("ABCD") == std::string::npos) return;  // no Canon layer: the options below are unused
  if (m.canon.norm != "none")
    refuse("model.canon.norm", quoted(m.canon.norm), std::string(fmt) + "'s Canon layers have no norm; allowed: none");
  if (m.canon.activation != "none" && m.canon.activation != "silu")
    refuse("model.canon.activation", quoted(m.canon.activation), "canon_activation is SiLU or nothing; allowed: none, silu");
  if (m.canon.dynamic != 0)
    refuse("model.canon.dynamic", std::to_string(m.canon.dynamic), std::string(fmt) + "'s Canon kernels are static; allowed: 0");
  if (m.canon.groups == 0) return;
  const char mixer = mixer_letters(m).empty() ? 'G' : mixer_letters(m)[0];
  for (char c : letters) {
    const int width = c == 'A' || c == 'C' ? m.d_model : c == 'B' ? canon_b_width(m, mixer) : c == 'D' ? canon_d_width(m) : 0;
    if (width != 0 && m.canon.groups != width) {
      refuse("model.canon.groups", std::to_string(m.canon.groups),
             std::string(fmt) + "'s Canon layers are depthwise (one group per channel), Canon-" + c + " has " +
                 std::to_string(width) + " channels; allowed: 0 (depthwise)");
      return;
    }
  }
}

void check_gla(const ModelConfig& m, const Refusals& refuse) {
  const GlaConfig& g = m.gla;
  // Without its short convs GLACanon applies SiLU to q, k and v; canonlab's GLA then uses them as projected.
  if (!has(m.canon.set, 'b'))
    refuse("model.canon.set", quoted(m.canon.set),
           "GLACanon without Canon-b (use_short_conv false) applies SiLU to q, k, v, canonlab's GLA does not; "
           "allowed: a set with b");
  // GLACanon builds canonB but stops at `assert False` in forward: the format has no usable Canon-B.
  if (has(m.canon.set, 'B'))
    refuse("model.canon.set", quoted(m.canon.set), "GLACanon's Canon-B is disabled (assert False in its forward); "
                                                   "allowed: letters from A, b, C, D");
  if (g.feature_map == "elu_plus_one")
    refuse("model.gla.feature_map", quoted(g.feature_map),
           "GLACanon's feature_map is an fla ACT2FN name, which has no 1 + elu; allowed: none, relu, silu");
  // GLABlock does not pass these two to the layer, which keeps its defaults of 16.
  if (g.gate_low_rank_dim != 16)
    refuse("model.gla.gate_low_rank_dim", std::to_string(g.gate_low_rank_dim),
           "GLACanon fixes the gk_proj rank at the layer default; allowed: 16");
  if (g.gate_logit_normalizer != 16.0)
    refuse("model.gla.gate_logit_normalizer", number(g.gate_logit_normalizer),
           "GLACanon fixes gate_logit_normalizer at the layer default; allowed: 16");
}

void check_gdn(const ModelConfig& m, const Refusals& refuse) {
  const QkvShape s = qkv_shape(m, 'D');
  // GatedDeltaNetCanon: value_dim = key_dim * expand_v, used as a layer width, so expand_v must be a whole number.
  if (s.value_width % s.key_width != 0)
    refuse("model.delta.expand_v", number(m.delta.expand_v),
           "GatedDeltaNetCanon's value width is key width * expand_v with a whole expand_v; key width " +
               std::to_string(s.key_width) + " does not divide value width " + std::to_string(s.value_width) +
               "; allowed: expand_v a whole multiple of expand_k (" + number(m.delta.expand_k) + ")");
  if (m.delta.allow_neg_eigval)
    refuse("model.delta.allow_neg_eigval", "true", "GatedDeltaNetCanon's beta is sigmoid(b_proj x) in (0, 1); allowed: false");
}

void check_mamba2(const ModelConfig& m, const Refusals& refuse) {
  // Its inference path normalizes y * silu(z) over all of d_inner (MambaRMSNormGated), canonlab per group.
  if (m.mamba2.ngroups != 1)
    refuse("model.mamba2.ngroups", std::to_string(m.mamba2.ngroups),
           "Mamba2Canon's gated RMSNorm spans all of d_inner in inference, canonlab's spans d_inner / ngroups; allowed: 1");
  // Mamba2CanonForCausalLM declares no tied weights (_tied_weights_keys = []).
  if (m.tie_embeddings)
    refuse("model.tie_embeddings", "true", "Mamba2CanonForCausalLM keeps lm_head separate; allowed: false");
}

json canon_keys(const ModelConfig& m) {
  return {{"canon_set", m.canon.set},
          {"canon_residual", m.canon.residual},
          {"canon_activation", m.canon.activation == "silu"},
          {"canon_kernel", m.canon.kernel_size},
          {"canon_bias", false}};
}

}  // namespace

HfFormat hf_linear_format(const ModelConfig& m, std::vector<std::string>& why) {
  const Refusals refuse{why};
  if (m.family == "gla") {
    check_shared(m, "GLACanon", true, refuse);
    check_gla(m, refuse);
    return HfFormat::gla_canon;
  }
  if (m.family == "gdn") {
    check_shared(m, "GatedDeltaNetCanon", true, refuse);
    check_gdn(m, refuse);
    return HfFormat::gdn_canon;
  }
  if (m.family == "mamba2") {
    check_shared(m, "Mamba2Canon", m.mamba2.mlp, refuse);
    check_mamba2(m, refuse);
    return HfFormat::mamba2_canon;
  }
  refuse("model.family", quoted(m.family),
         m.family == "deltanet"
             ? "PhysicsLM4 publishes no DeltaNet format (GatedDeltaNetCanon always gates); allowed: transformer, gla, gdn, mamba2"
             : "no Hugging Face format mixes layer kinds; allowed: transformer, gla, gdn, mamba2");
  return HfFormat::gla_canon;
}

json hf_linear_config_json(const RunConfig& cfg, HfFormat f) {
  const ModelConfig& m = cfg.model;
  const json bos = cfg.task.name == "copy" ? json(cfg.task.vocab) : json(nullptr);
  const bool conv = has(m.canon.set, 'b');
  json j = {
      {"vocab_size", m.vocab_size},
      {"hidden_size", m.d_model},
      {"num_hidden_layers", m.n_layers},
      {"max_position_embeddings", m.max_seq_len},
      {"initializer_range", m.init_std},
      {"tie_word_embeddings", m.tie_embeddings},
      {"use_cache", true},
      {"dtype", "float32"},
      {"bos_token_id", bos},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
  };
  j.update(canon_keys(m));
  j["auto_map"] = hf_auto_map(f);  // canonlab's model code, which export writes beside config.json (io/hf/remote_code.h)
  if (f == HfFormat::gla_canon) {
    const GlaConfig& g = m.gla;
    j.update(json{
        {"architectures", {"GLACanonForCausalLM"}},
        {"model_type", "GLACanon"},
        {"expand_k", g.expand_k},
        {"expand_v", g.expand_v},
        {"num_heads", m.n_heads},
        {"num_kv_heads", nullptr},
        {"feature_map", g.feature_map == "none" ? json(nullptr) : json(g.feature_map == "silu" ? "swish" : g.feature_map)},
        {"attn_mode", "chunk"},
        {"use_short_conv", conv},
        {"conv_size", m.recurrent.conv_kernel},
        {"use_output_gate", g.output_gate},
        {"output_gate_rank", nullptr},
        {"clamp_min", g.clamp_min < 0 ? json(g.clamp_min) : json(nullptr)},  // our 0 = no clamp
        {"elementwise_affine", true},
        {"norm_eps", m.norm_eps},
        {"use_gk", true},
        {"use_gv", false},
        {"attn", nullptr},
        {"intermediate_size", m.mlp.hidden_dim},
        {"hidden_ratio", 4},
        {"hidden_act", "swish"},
        {"zeyuan_split_init", false},
        {"zeyuan_layernorm", false},
        {"fuse_norm", true},
        {"fuse_swiglu", true},
        {"fuse_cross_entropy", false},
        {"use_l2warp", false},
    });
  } else if (f == HfFormat::gdn_canon) {
    const QkvShape s = qkv_shape(m, 'D');
    j.update(json{
        {"architectures", {"GatedDeltaNetCanonForCausalLM"}},
        {"model_type", "GatedDeltaNetCanon"},
        {"attn_mode", "chunk"},
        {"num_heads", m.n_heads},
        {"head_dim", s.head_k},
        {"expand_v", s.value_width / s.key_width},  // theirs: value width = key width * expand_v
        {"use_gate", m.delta.output_gate},
        {"output_gate_rank", nullptr},
        {"use_short_conv", conv},
        {"conv_size", m.recurrent.conv_kernel},
        {"norm_eps", m.norm_eps},
        {"attn", nullptr},
        {"intermediate_size", m.mlp.hidden_dim},
        {"hidden_ratio", 4},
        {"hidden_act", "swish"},
        {"zeyuan_split_init", false},
        {"zeyuan_layernorm", false},
        {"fuse_norm", true},
        {"fuse_swiglu", true},
        {"fuse_cross_entropy", false},
    });
  } else {
    const Mamba2Shape s = mamba2_shape(m);
    const Mamba2Config& mc = m.mamba2;
    j.update(json{
        {"architectures", {"Mamba2CanonForCausalLM"}},
        {"model_type", "Mamba2Canon"},
        {"num_heads", s.heads},
        {"head_dim", s.headdim},
        {"state_size", s.d_state},
        {"expand", mc.expand},
        {"n_groups", s.groups},
        {"conv_kernel", m.recurrent.conv_kernel},
        {"use_conv_bias", conv},
        {"noconv1d", !conv},  // without b the conv is the identity kernel, no bias, no SiLU, as canonlab's
        {"use_bias", false},
        {"hidden_act", "silu"},
        {"layer_norm_epsilon", m.norm_eps},
        {"rms_norm", true},
        {"residual_in_fp32", false},  // Mamba2CanonBlock asserts it is off
        {"rescale_prenorm_residual", false},
        {"time_step_min", mc.dt_min},  // the dt_bias init only; time_step_limit keeps its default (0, inf): no clamp
        {"time_step_max", mc.dt_max},
        {"time_step_floor", mc.dt_init_floor},
        {"chunk_size", 256},
        {"mlp_type", mc.mlp ? json("mlp10") : json(nullptr)},
        {"intermediate_size", mc.mlp ? json(m.mlp.hidden_dim) : json(nullptr)},
    });
  }
  return j;
}

}  // namespace canonlab
