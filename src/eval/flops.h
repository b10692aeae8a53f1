#pragma once
// Model FLOPs of one training step (forward + backward = 3x forward), counting multiply-adds as 2 FLOPs:
//   matmuls: 6 * tokens * (parameters in projection matrices, lm_head included)
//   attention scores and weighted values: 6 * 2 * B * H * (T*(T+1)/2) * D per layer (causal half only)
// Elementwise work (norms, Canon convolutions, softmax) is not counted, as is customary.
#include "config/run_config.h"

namespace canonlab {

inline double transformer_train_flops(const ModelConfig& m, int B, int T) {
  const double C = m.d_model, V = m.vocab_size, L = m.n_layers, Hd = m.mlp.hidden_dim;
  const double mlp_mats = m.mlp.kind == "swiglu" ? 3 : 2;
  const double matrix_params = L * (4 * C * C + mlp_mats * C * Hd) + V * C;
  const double tokens = double(B) * T;
  const double attn = L * 2.0 * B * m.n_heads * (double(T) * (T + 1) / 2) * (C / m.n_heads);
  return 6.0 * tokens * matrix_params + 6.0 * attn;
}

}  // namespace canonlab
