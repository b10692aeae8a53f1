#pragma once
// Derived sizes of the model families, computed in one place so that config validation, the modules and the
// FLOP counter agree (docs/linear-families.md).
#include <string>

#include "config/run_config.h"

namespace canonlab {

// One mixer letter per layer: A attention, S sliding-window attention, M Mamba2, G GLA, D Gated DeltaNet,
// N DeltaNet.
inline std::string mixer_letters(const ModelConfig& m) {
  if (m.family == "hybrid") return m.layer_pattern;
  char letter = m.family == "mamba2" ? 'M' : m.family == "gla" ? 'G' : m.family == "gdn" ? 'D' : m.family == "deltanet" ? 'N' : 'A';
  return std::string(size_t(m.n_layers), letter);
}

inline bool is_attention_letter(char letter) { return letter == 'A' || letter == 'S'; }

// Whether layers of this mixer carry an MLP half (Mamba2 layers only with model.mamba2.mlp).
inline bool layer_has_mlp(const ModelConfig& m, char letter) { return letter != 'M' || m.mamba2.mlp; }

struct Mamba2Shape {
  int d_inner, headdim, heads, d_state, groups, conv_dim, d_in_proj;
};
inline Mamba2Shape mamba2_shape(const ModelConfig& m) {
  Mamba2Shape s{};
  s.d_inner = m.mamba2.expand * m.d_model;
  s.headdim = m.mamba2.headdim > 0 ? m.mamba2.headdim : s.d_inner / m.n_heads;
  s.heads = s.headdim > 0 ? s.d_inner / s.headdim : 0;
  s.d_state = m.mamba2.d_state;
  s.groups = m.mamba2.ngroups;
  s.conv_dim = s.d_inner + 2 * s.groups * s.d_state;
  s.d_in_proj = s.d_inner + s.conv_dim + s.heads;
  return s;
}

// GLA, Gated DeltaNet and DeltaNet: key width Kd and value width Vd over n_heads heads of K and V.
struct QkvShape {
  int key_width, value_width, head_k, head_v;
};
inline QkvShape qkv_shape(const ModelConfig& m, char letter) {
  const double ek = letter == 'G' ? m.gla.expand_k : m.delta.expand_k;
  const double ev = letter == 'G' ? m.gla.expand_v : m.delta.expand_v;
  QkvShape s{};
  s.key_width = int(m.d_model * ek);
  s.value_width = int(m.d_model * ev);
  s.head_k = s.key_width / m.n_heads;
  s.head_v = s.value_width / m.n_heads;
  return s;
}

// Attention's key/value heads (grouped-query attention; model.n_kv_heads, 0 before validation = n_heads) and the
// width of its projected [q | k | v]: d_model + 2 · n_kv_heads · head_dim.
inline int attention_kv_heads(const ModelConfig& m) { return m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads; }
inline int attention_kv_width(const ModelConfig& m) { return attention_kv_heads(m) * (m.d_model / m.n_heads); }
inline int attention_qkv_width(const ModelConfig& m) { return m.d_model + 2 * attention_kv_width(m); }

// Width of the concatenated mixer inputs Canon-B convolves over.
inline int canon_b_width(const ModelConfig& m, char letter) {
  if (is_attention_letter(letter)) return attention_qkv_width(m);
  if (letter == 'M') return mamba2_shape(m).d_in_proj;
  QkvShape s = qkv_shape(m, letter);
  return 2 * s.key_width + s.value_width;
}

// Width Canon-D convolves over: the MLP's up projection (gate|up for swiglu).
inline int canon_d_width(const ModelConfig& m) { return m.mlp.kind == "swiglu" ? 2 * m.mlp.hidden_dim : m.mlp.hidden_dim; }

}  // namespace canonlab
