#pragma once
// Model FLOPs of one training step (forward + backward = 3x forward), counting multiply-adds as 2 FLOPs:
//   matmuls: 6 * tokens * (parameters in projection matrices, lm_head included)
//   attention scores and weighted values: 6 * 2 * B * H * (visible query-key pairs) * D per attention layer
//     (the causal half, or the window of S layers)
//   linear-time recurrences, per token and head (the per-step algorithm, not the chunked one's extra work):
//     Mamba2 and GLA 4·K·V (state update and readout), (Gated) DeltaNet 6·K·V (also the prediction Sᵀk); x3
//   dynamic Canon (model.canon.dynamic = R): each Canon layer's two low-rank maps V: (R, C), U: (C·K, R) are
//     projection matrices, 6 * tokens * R·C·(1 + K), plus the dynamic taps themselves (the per-token kernel is not
//     a weight, so they count as elementwise would not): 6 * tokens * C·K
// Elementwise work (norms, static Canon and short convolutions, gates, softmax) is not counted, as is customary.
#include "config/model_shapes.h"
#include "config/run_config.h"

namespace canonlab {

inline double model_train_flops(const ModelConfig& m, int B, int T) {
  const double C = m.d_model, V = m.vocab_size, Hd = m.mlp.hidden_dim, H = m.n_heads;
  const double tokens = double(B) * T;
  const double mlp_params = (m.mlp.kind == "swiglu" ? 3 : 2) * C * Hd;
  double matrix_params = V * C, attention = 0, recurrence = 0, canon_channels = 0;  // Σ channels of Canon layers
  const auto has_canon = [&](char placement) { return m.canon.set.find(placement) != std::string::npos; };
  for (char letter : mixer_letters(m)) {
    if (has_canon('A')) canon_channels += C;
    if (has_canon('C') && layer_has_mlp(m, letter)) canon_channels += C;
    if (has_canon('D') && layer_has_mlp(m, letter)) canon_channels += canon_d_width(m);
    if (has_canon('B')) canon_channels += canon_b_width(m, letter);
    if (layer_has_mlp(m, letter)) matrix_params += mlp_params;
    if (is_attention_letter(letter)) {
      matrix_params += 2 * C * C + 2 * C * attention_kv_width(m);  // q, o; k, v over the key/value heads
      double pairs = 0;
      for (int t = 0; t < T; t++) pairs += (letter == 'S' && m.attention.window < t + 1) ? m.attention.window : t + 1;
      attention += 2.0 * B * H * pairs * (C / H);
    } else if (letter == 'M') {
      const Mamba2Shape s = mamba2_shape(m);
      matrix_params += C * s.d_in_proj + double(s.d_inner) * C;
      recurrence += tokens * s.heads * 4.0 * s.headdim * s.d_state;
    } else {
      const QkvShape s = qkv_shape(m, letter);
      const bool gate = letter == 'G' ? m.gla.output_gate : m.delta.output_gate;
      matrix_params += C * (2.0 * s.key_width + s.value_width) + (gate ? 2.0 : 1.0) * C * s.value_width;  // q k v o (g)
      if (letter == 'G') matrix_params += double(m.gla.gate_low_rank_dim) * (C + s.key_width);
      else matrix_params += (letter == 'D' ? 2 : 1) * C * H;  // b_proj (and a_proj)
      recurrence += tokens * H * (letter == 'G' ? 4.0 : 6.0) * s.head_k * s.head_v;
    }
  }
  const double R = m.canon.dynamic, K = m.canon.kernel_size;
  const double dynamic_canon = R > 0 ? canon_channels * (R * (1 + K) + K) : 0;
  return 6.0 * tokens * (matrix_params + dynamic_canon) + 6.0 * attention + 3.0 * recurrence;
}

}  // namespace canonlab
