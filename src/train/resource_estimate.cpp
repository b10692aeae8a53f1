// The resource estimate (train/resource_estimate.h, docs/resources.md). The arena tally below mirrors, allocation
// by allocation, what the modules of src/nn take from the step arena; tests/unit/test_resource_estimate.cpp holds
// it against Arena::high_water_bytes() after a real step for every family and Canon placement, so a module that
// changes what it allocates without this file being updated fails there.
#include "train/resource_estimate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "config/model_shapes.h"
#include "data/copy_task.h"
#include "data/lano.h"
#include "data/task.h"
#include "data/text.h"
#include "engine/error.h"
#include "engine/ops/canon_conv/fused.h"
#include "engine/ops/linear/fast.h"
#include "engine/params.h"
#include "engine/threads.h"
#include "eval/flops.h"
#include "models/decoder_model.h"
#include "models/mixers.h"
#include "nn/block.h"
#include "nn/canon.h"
#include "nn/linear.h"
#include "nn/norm.h"

namespace canonlab {
namespace {

constexpr double kFloat = sizeof(float);
constexpr double kArenaAlign = 64;  // engine/arena.cpp rounds every allocation up to whole 64-byte lines
constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;

// What the process holds whatever the model: the binary and its libraries (oneDNN, OpenBLAS, libstdc++, yaml-cpp)
// and, per OpenMP worker, its stack and the malloc arena its kernel scratch and GEMM packing buffers come from.
// Measured as peak RSS on the development machine: 16 MiB for a tiny model at 1 to 8 threads; E1-Bk0 grows by
// 0.3 MiB and the Gated DeltaNet preset by about 1 MiB per thread (docs/resources.md#calibration).
constexpr double kProcessBaseBytes = 16 * kMiB;
constexpr double kPerThreadBytes = 1 * kMiB;

// Fraction of the GEMM rate a whole training step reaches, by mixer, from BENCHMARKS.md: model GFLOP/s of
// `bench-step` (4 layers, d_model 128, T = 255, 2 threads) over oneDNN's sgemm rate there (199 GFLOP/s):
// transformer 136-147 (E1-Bk0 at T = 49: 129), Mamba2 138, GLA 108, Gated DeltaNet 123, DeltaNet 117 with the
// family's own conv only; Canon layers (A, B, C, D) cost about a fifth more time (docs/resources.md#time).
double step_efficiency(char letter) {
  switch (letter) {
    case 'A': case 'S': return 0.65;
    case 'M': return 0.65;
    case 'G': return 0.5;
    case 'D': return 0.6;
    default: return 0.55;  // N
  }
}
constexpr double kCanonEfficiency = 0.8;

bool has_canon(const ModelConfig& m, char letter) { return m.canon.set.find(letter) != std::string::npos; }

// The step arena's bookkeeping without the memory: allocations accumulate, mark/release drop back (engine/arena.h).
// Sizes in double: an absurd config must give an absurd number, not an overflowed small one.
class ArenaTally {
 public:
  void floats(double count) {
    in_use_ += std::ceil(std::max(count * kFloat, 1.0) / kArenaAlign) * kArenaAlign;
    high_water_ = std::max(high_water_, in_use_);
  }
  double mark() const { return in_use_; }
  void release(double mark) { in_use_ = mark; }
  double high_water() const { return high_water_; }

 private:
  double in_use_ = 0, high_water_ = 0;
};

// One forward (and backward) pass of DecoderModel over (B, T) tokens, as arena allocations. Each method is named
// after the module function it mirrors and allocates what that function allocates, in its order.
class StepArena {
 public:
  // fp32: dynamic Canon takes the backend's low-rank op (the CPU's, fp32 only), which keeps no offsets Δ
  // keep_probs: a probe's forward, which asks attention for its (B, H, T, T) probabilities
  StepArena(const ModelConfig& m, double B, double T, int threads, bool fp32, bool keep_probs = false)
      : m_(m), B_(B), T_(T), N_(B * T), n_(B * T * m.d_model), threads_(threads), lowrank_dynamic_(fp32),
        keep_probs_(keep_probs), letters_(mixer_letters(m)) {}

  // The batch uploaded to the device (StepContext::upload): tokens, and for the loss its targets and mask, 4 bytes
  // each (train/step.h, eval/evaluate.cpp; the probes upload tokens only).
  void upload_batch(bool with_loss) {
    alloc(N_);
    if (with_loss) alloc(N_), alloc(N_);
  }
  // DecoderModel::forward
  void forward() {
    alloc(n_);  // token embeddings
    for (int l = 0; l < m_.n_layers; l++) {
      alloc(n_);
      block_forward(letters_[size_t(l)], l);
      if (cross_layer(l)) alloc(n_), cross_layer_canon_forward();  // the connection's branch, then its CanonLayer
    }
    alloc(n_);
    norm_forward(m_.norm);
    alloc(N_ * m_.vocab_size);  // logits
  }
  // masked_cross_entropy (train/loss.h)
  void loss(bool with_grad) {
    alloc(N_);
    if (with_grad) alloc(N_), alloc(N_ * m_.vocab_size);
  }
  // DecoderModel::backward: three residual-stream buffers (four with cross-layer Canon), then each block's
  // temporaries, released after it; a cross-layer connection's CanonLayer keeps its backward scratch.
  void backward() {
    alloc(n_), alloc(n_), alloc(n_);
    if (!m_.canon.cross_layer.layers.empty()) alloc(n_);
    for (int l = m_.n_layers; l-- > 0;) {
      const double mark = arena_.mark();
      block_backward(letters_[size_t(l)], l);
      arena_.release(mark);
      if (cross_layer(l)) cross_layer_canon_backward();
    }
  }
  double high_water() const { return arena_.high_water(); }

 private:
  void alloc(double floats) { arena_.floats(floats); }

  void norm_forward(const std::string& kind) {
    alloc(N_);  // rstd
    if (kind == "layernorm") alloc(N_);  // mean
  }

  // model.canon's layers (A-D) or a cross-layer connection's (depthwise, its own kernel, activation and norm, never
  // dynamic).
  void canon_forward(double channels) {
    canon_forward(channels, m_.canon.activation, m_.canon.norm, m_.canon.dynamic);
  }
  void canon_backward(double channels) {
    canon_backward(channels, m_.canon.kernel_size, m_.canon.groups <= 0 ? int(channels) : m_.canon.groups,
                   m_.canon.activation, m_.canon.norm, m_.canon.dynamic);
  }
  void cross_layer_canon_forward() {
    canon_forward(m_.d_model, m_.canon.cross_layer.activation, m_.canon.cross_layer.norm, 0);
  }
  void cross_layer_canon_backward() {
    canon_backward(m_.d_model, m_.canon.cross_layer.kernel_size, m_.d_model, m_.canon.cross_layer.activation,
                   m_.canon.cross_layer.norm, 0);
  }
  // CanonLayer on the CPU: the fused op where it pays (CanonEpilogue::fusion_pays) and the layer is static, else
  // the separate passes, each stage's output kept. (The residual does not change what either keeps.)
  static CanonEpilogue epilogue(const std::string& activation, const std::string& norm) {
    CanonEpilogue ep;
    ep.activation = activation == "silu" ? CanonActivation::silu
                    : activation == "elu" ? CanonActivation::elu
                                          : CanonActivation::none;
    ep.norm = norm == "layernorm" ? CanonNorm::layernorm : norm == "rmsnorm" ? CanonNorm::rmsnorm : CanonNorm::none;
    return ep;
  }
  static bool fused(const CanonEpilogue& ep, int dynamic) { return dynamic == 0 && ep.fusion_pays(); }
  void canon_forward(double channels, const std::string& activation, const std::string& norm, int dynamic) {
    const CanonEpilogue ep = epilogue(activation, norm);
    if (!fused(ep, dynamic)) {
      alloc(N_ * channels);  // conv output
      if (dynamic > 0) {  // z kept; without the low-rank op Δ is a temporary, released at once (nn/dynamic_canon.h)
        alloc(N_ * dynamic);
        if (!lowrank_dynamic_) {
          const double mark = arena_.mark();
          alloc(N_ * channels * m_.canon.kernel_size);
          arena_.release(mark);
        }
      }
      if (activation != "none") alloc(N_ * channels);
      if (norm != "none") alloc(N_ * channels), norm_forward(norm);
      return;
    }
    if (ep.saves_conv()) alloc(N_ * channels);
    if (norm != "none") alloc(N_);       // rstd
    if (norm == "layernorm") alloc(N_);  // mean
  }
  void canon_backward(double channels, double K, int groups, const std::string& activation,
                      const std::string& norm, int dynamic) {
    const CanonEpilogue ep = epilogue(activation, norm);
    if (!fused(ep, dynamic)) {
      if (norm != "none") alloc(N_ * channels);
      if (activation != "none") alloc(N_ * channels);
      if (dynamic > 0 && lowrank_dynamic_)  // dz, the map's dx (nn/dynamic_canon.h)
        alloc(N_ * dynamic), alloc(N_ * channels);
      else if (dynamic > 0)  // Δ recomputed, dΔ, dz, the map's dx
        alloc(N_ * channels * K), alloc(N_ * channels * K), alloc(N_ * dynamic), alloc(N_ * channels);
      return;
    }
    alloc(double(canon_fused_scratch_size(int(B_), int(T_), int(channels), int(K), groups, ep)));
  }
  bool cross_layer(int l) const { return std::ranges::count(m_.canon.cross_layer.layers, l) > 0; }

  void short_conv_forward(double channels) { alloc(N_ * channels), alloc(N_ * channels); }
  // The owners always pass a strided dx (a column block of a wider row), which takes a contiguous copy.
  void short_conv_backward(double channels) { alloc(N_ * channels), alloc(N_ * channels); }

  void block_forward(char letter, int layer) {
    norm_forward(m_.norm), alloc(n_);
    if (has_canon(m_, 'A')) alloc(n_), canon_forward(m_.d_model);
    alloc(n_);
    mixer_forward(letter, layer);
    if (!layer_has_mlp(m_, letter)) return;
    alloc(n_), alloc(n_);
    norm_forward(m_.norm);
    if (has_canon(m_, 'C')) alloc(n_), canon_forward(m_.d_model);
    alloc(n_);
    mlp_forward();
  }
  void block_backward(char letter, int layer) {
    alloc(n_);
    if (layer_has_mlp(m_, letter)) {
      alloc(n_);
      mlp_backward();
      if (has_canon(m_, 'C')) alloc(n_), canon_backward(m_.d_model);
    }
    alloc(n_);
    mixer_backward(letter, layer);
    if (has_canon(m_, 'A')) alloc(n_), canon_backward(m_.d_model);
  }

  double mlp_width() const { return m_.mlp.kind == "swiglu" ? 2.0 * m_.mlp.hidden_dim : m_.mlp.hidden_dim; }
  void mlp_forward() {
    alloc(N_ * mlp_width());
    if (has_canon(m_, 'D')) alloc(N_ * mlp_width()), canon_forward(mlp_width());
    alloc(N_ * m_.mlp.hidden_dim);
  }
  void mlp_backward() {
    alloc(N_ * m_.mlp.hidden_dim), alloc(N_ * mlp_width());
    if (has_canon(m_, 'D')) alloc(N_ * mlp_width()), canon_backward(mlp_width());
    if (m_.mlp.kind == "swiglu" && m_.mlp.bias) alloc(n_);  // gate and up cannot run as one GEMM
  }

  void mixer_forward(char letter, int layer) {
    if (is_attention_letter(letter)) return attention_forward(layer);
    if (letter == 'M') return mamba2_forward();
    if (letter == 'G') return gla_forward();
    return delta_forward(letter == 'D');
  }
  void mixer_backward(char letter, int layer) {
    if (is_attention_letter(letter)) return attention_backward(layer);
    if (letter == 'M') return mamba2_backward();
    if (letter == 'G') return gla_backward();
    return delta_backward(letter == 'D');
  }

  bool key_shifted(int layer) const { return std::ranges::count(m_.attention.key_shift.layers, layer) > 0; }
  void attention_forward(int layer) {
    if (key_shifted(layer)) alloc(n_);
    alloc(3 * n_);  // q | k | v
    if (has_canon(m_, 'B')) alloc(3 * n_), canon_forward(3.0 * m_.d_model);
    if (m_.attention.position == "rope") alloc(3 * n_);
    if (m_.attention.scoring == "sign_ste") alloc(3 * n_);
    if (m_.attention.position == "alibi") alloc(m_.n_heads);  // the slopes, uploaded
    alloc(n_);
    alloc(B_ * m_.n_heads * T_ * 2);                       // the softmax state, kept for backward
    if (keep_probs_) alloc(B_ * m_.n_heads * T_ * T_);     // the probabilities, for the probe that asked
    const double mark = arena_.mark();
    alloc(double(threads_) * 2 * T_ * T_);                 // attention_scratch_size, given back after the op
    arena_.release(mark);
  }
  void attention_backward(int layer) {
    alloc(n_), alloc(3 * n_);
    alloc(double(threads_) * 2 * T_ * T_);  // attention_scratch_size
    if (has_canon(m_, 'B')) alloc(3 * n_), canon_backward(3.0 * m_.d_model);
    if (key_shifted(layer) || m_.attention.qkv_bias) alloc(n_);  // q, k, v not one GEMM
  }

  bool chunked() const { return m_.recurrent.kernel != "naive"; }
  // ssd_states_size, gla_states_size, delta_rule_states_size: one (K, V) state per sequence, head and chunk.
  double chunk_states(double heads, double k, double v) const {
    return B_ * heads * std::ceil(T_ / m_.recurrent.chunk_size) * k * v;
  }

  void mamba2_forward() {
    const Mamba2Shape s = mamba2_shape(m_);
    const double GN = double(s.groups) * s.d_state;
    alloc(N_ * s.d_in_proj);
    if (has_canon(m_, 'B')) alloc(N_ * s.d_in_proj), canon_forward(s.d_in_proj);
    if (has_canon(m_, 'b')) alloc(N_ * s.conv_dim), short_conv_forward(s.conv_dim);
    alloc(N_ * s.d_inner), alloc(N_ * GN), alloc(N_ * GN), alloc(N_ * s.d_inner), alloc(N_ * s.heads);  // x B C z dt
    alloc(s.heads);  // A
    alloc(N_ * s.d_inner);
    if (chunked()) alloc(chunk_states(s.heads, s.headdim, s.d_state));
    alloc(N_ * s.groups), alloc(N_ * s.d_inner);  // rstd, normed
  }
  void mamba2_backward() {
    const Mamba2Shape s = mamba2_shape(m_);
    const double GN = double(s.groups) * s.d_state;
    for (int i = 0; i < 4; i++) alloc(N_ * s.d_inner);  // dnormed dy dz dx
    alloc(N_ * s.heads), alloc(N_ * GN), alloc(N_ * GN);
    alloc(s.heads);  // dA
    alloc(N_ * s.d_in_proj);
    if (has_canon(m_, 'b')) alloc(N_ * s.conv_dim), short_conv_backward(s.conv_dim);
    if (has_canon(m_, 'B')) alloc(N_ * s.d_in_proj), canon_backward(s.d_in_proj);
  }

  void qkv_inputs_forward(const QkvShape& s, bool silu_without_conv) {
    const double W = 2.0 * s.key_width + s.value_width;
    alloc(N_ * W);
    if (has_canon(m_, 'b')) {
      alloc(N_ * W);
      short_conv_forward(s.key_width), short_conv_forward(s.key_width), short_conv_forward(s.value_width);
    } else if (silu_without_conv) {
      alloc(N_ * W);
    }
    if (has_canon(m_, 'B')) alloc(N_ * W), canon_forward(W);
  }
  void qkv_inputs_backward(const QkvShape& s, bool silu_without_conv) {
    const double W = 2.0 * s.key_width + s.value_width;
    if (has_canon(m_, 'B')) alloc(N_ * W), canon_backward(W);
    if (has_canon(m_, 'b')) {
      alloc(N_ * W);
      short_conv_backward(s.key_width), short_conv_backward(s.key_width), short_conv_backward(s.value_width);
    } else if (silu_without_conv) {
      alloc(N_ * W);
    }
  }

  void gated_output_forward(double value_width, bool gate) {
    if (gate) alloc(N_ * value_width);
    alloc(N_ * m_.n_heads), alloc(N_ * value_width);
  }
  void gated_output_backward(double value_width, bool gate) {
    alloc(N_ * value_width);
    if (gate) alloc(N_ * value_width), alloc(n_);
  }

  void gla_forward() {
    const QkvShape s = qkv_shape(m_, 'G');
    const double rank = m_.gla.gate_low_rank_dim;
    qkv_inputs_forward(s, false);
    alloc(N_ * s.key_width), alloc(N_ * s.key_width), alloc(N_ * s.value_width);  // q k v
    alloc(N_ * rank), alloc(N_ * s.key_width), alloc(N_ * s.key_width);          // gate low, logit, gate
    alloc(N_ * s.value_width);
    if (chunked()) alloc(chunk_states(m_.n_heads, s.head_k, s.head_v));
    gated_output_forward(s.value_width, m_.gla.output_gate);
  }
  void gla_backward() {
    const QkvShape s = qkv_shape(m_, 'G');
    alloc(N_ * s.value_width);
    gated_output_backward(s.value_width, m_.gla.output_gate);
    alloc(N_ * s.key_width), alloc(N_ * s.key_width), alloc(N_ * s.value_width);  // dq dk dv
    alloc(N_ * s.key_width), alloc(N_ * s.key_width);                            // dg, dlogit
    alloc(N_ * m_.gla.gate_low_rank_dim), alloc(n_);                             // dlow, dtmp
    alloc(N_ * (2.0 * s.key_width + s.value_width));
    qkv_inputs_backward(s, false);
  }

  void delta_forward(bool gated) {
    const QkvShape s = qkv_shape(m_, gated ? 'D' : 'N');
    const double H = m_.n_heads;
    qkv_inputs_forward(s, true);
    alloc(N_ * s.key_width), alloc(N_ * s.key_width), alloc(N_ * s.value_width);  // q k v
    alloc(N_ * H), alloc(N_ * H), alloc(N_ * H), alloc(N_ * H);                  // rstd q, k; beta logit, beta
    if (gated) alloc(N_ * H), alloc(N_ * H);                                      // a logit, decay
    alloc(N_ * s.value_width);
    if (chunked()) alloc(chunk_states(H, s.head_k, s.head_v));
    gated_output_forward(s.value_width, m_.delta.output_gate);
  }
  void delta_backward(bool gated) {
    const QkvShape s = qkv_shape(m_, gated ? 'D' : 'N');
    const double H = m_.n_heads;
    alloc(N_ * s.value_width);
    gated_output_backward(s.value_width, m_.delta.output_gate);
    alloc(N_ * s.key_width), alloc(N_ * s.key_width), alloc(N_ * s.value_width), alloc(N_ * H);  // dq dk dv dbeta
    if (gated) alloc(N_ * H);
    alloc(n_), alloc(N_ * H);  // dtmp, dlogit
    alloc(N_ * (2.0 * s.key_width + s.value_width));
    qkv_inputs_backward(s, true);
  }

  const ModelConfig& m_;
  double B_, T_, N_, n_;
  int threads_;
  bool lowrank_dynamic_;
  bool keep_probs_;
  std::string letters_;
  ArenaTally arena_;
};

double batch_bytes(double B, double T) {
  return B * T * (3 * sizeof(int) + 2 * sizeof(float));  // Batch: tokens, targets, score_tag; loss and score masks
}

std::string format_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1024 * 1024 * kGiB) std::snprintf(buf, sizeof buf, "%.1f PiB", bytes / (1024 * 1024 * kGiB));
  else if (bytes >= 1024 * kGiB) std::snprintf(buf, sizeof buf, "%.1f TiB", bytes / (1024 * kGiB));
  else if (bytes >= kGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  else if (bytes >= kMiB) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / kMiB);
  else std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024);
  return buf;
}

// 1.23 G, 804.2 k: a number with its SI prefix and a space, ready for a unit ("FLOP") or a noun.
std::string format_count(double value) {
  char buf[64];
  if (value >= 1e18) std::snprintf(buf, sizeof buf, "%.3g E", value / 1e18);
  else if (value >= 1e15) std::snprintf(buf, sizeof buf, "%.2f P", value / 1e15);
  else if (value >= 1e12) std::snprintf(buf, sizeof buf, "%.2f T", value / 1e12);
  else if (value >= 1e9) std::snprintf(buf, sizeof buf, "%.2f G", value / 1e9);
  else if (value >= 1e6) std::snprintf(buf, sizeof buf, "%.2f M", value / 1e6);
  else if (value >= 1e3) std::snprintf(buf, sizeof buf, "%.1f k", value / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f ", value);
  return buf;
}

std::string format_seconds(double s) {
  char buf[64];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else if (s < 365 * 86400) std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  else std::snprintf(buf, sizeof buf, "%.3g years", s / (365.25 * 86400));
  return buf;
}

// The model keys that set the parameter count, the one that dominates first.
std::string parameter_keys(const ModelConfig& m) {
  const double C = m.d_model;
  const double embedding = double(m.vocab_size) * C * (m.tie_embeddings ? 1 : 2);
  const std::string letters = mixer_letters(m);
  std::string widths;
  if (std::ranges::any_of(letters, [&](char l) { return layer_has_mlp(m, l); })) widths += ", model.mlp.hidden_dim";
  if (letters.find('M') != std::string::npos) widths += ", model.mamba2.expand";
  if (letters.find('G') != std::string::npos) widths += ", model.gla.expand_k, model.gla.expand_v";
  if (letters.find_first_of("DN") != std::string::npos) widths += ", model.delta.expand_k, model.delta.expand_v";
  const double per_layer_guess = 12 * C * C;
  if (embedding > per_layer_guess * m.n_layers) return "model.vocab_size, model.d_model, model.n_layers" + widths;
  return "model.d_model, model.n_layers" + widths + ", model.vocab_size";
}

// The keys behind the activation arena, with the one that makes it large named first where one does.
std::string arena_keys(const ModelConfig& m, double B, double T, int threads, const std::string& seq_key,
                       double arena) {
  const std::string letters = mixer_letters(m);
  // Attention keeps T numbers per head and query row; its (T, T) panels exist per thread, one layer at a time.
  const bool attention = std::ranges::any_of(letters, is_attention_letter);
  const double scores = attention ? 2.0 * threads * T * T * kFloat : 0;
  const double logits = 2 * B * T * double(m.vocab_size) * kFloat;
  std::string keys = "train.batch_size, " + seq_key;
  if (scores > 0.25 * arena) keys += " (attention's per-thread panels grow with T^2)";
  if (logits > 0.25 * arena) keys += ", model.vocab_size";
  keys += ", model.d_model, model.n_layers";
  if (std::ranges::any_of(letters, [&](char l) { return layer_has_mlp(m, l); })) keys += ", model.mlp.hidden_dim";
  return keys;
}

int resolved_threads(const RunConfig& cfg) { return cfg.train.threads > 0 ? cfg.train.threads : thread_count(); }

int evaluation_count(const TrainConfig& t) {
  if (t.eval_every <= 0) return 1;
  return t.steps / t.eval_every + (t.steps % t.eval_every != 0 ? 1 : 0);
}

double read_number_file(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

namespace {
// bf16 precision: Bf16Gemm (engine/ops/linear/bf16.h) converts both operands of each GEMM into two scratch buffers
// that grow to the largest operand they have held, and (native path) computes a strided output in a dense one. The
// first operand is x or dy (N rows of in or out values), the second w (out, in) or, for dw, x (N, in). Consecutive 2-D weights with the same input width are counted as one
// fused GEMM (q|k|v, gate|up: Linear::followed_in_memory_by), which can only overstate. Elements, for N rows.
double bf16_gemm_scratch_elements(const ModelConfig& m, double N) {
  double first = 0, second = 0, output = 0, fused_out = 0, fused_in = -1;
  for (const ParamInfo& p : parameter_layout(m)) {
    if (p.shape.size() != 2) {
      fused_in = -1;
      continue;
    }
    const double out = double(p.shape[0]), in = double(p.shape[1]);
    fused_out = in == fused_in ? fused_out + out : out;
    fused_in = in;
    first = std::max(first, N * std::max(in, fused_out));
    second = std::max(second, std::max(fused_out * in, N * in));
    output = std::max(output, N * std::max(in, out));  // dx (N, in) or y (N, out), when written into a wider buffer
  }
  return first + second + output;
}
}  // namespace

// The model's modules registered (models/decoder_model.h), never allocated.
std::vector<ParamInfo> parameter_layout(const ModelConfig& m) {
  ParameterStore<float> store;
  const DecoderModules<float> modules(store, m);
  return store.infos();
}

uint64_t count_parameters(const ModelConfig& m) {
  uint64_t total = 0;
  for (const ParamInfo& p : parameter_layout(m)) total += p.numel;
  return total;
}

double training_arena_bytes(const ModelConfig& model, int batch, int seq_len, int threads, bool fp32) {
  StepArena step(model, batch, seq_len, threads, fp32);
  step.upload_batch(true);
  step.forward();
  step.loss(true);
  step.backward();
  return step.high_water();
}

double forward_arena_bytes(const ModelConfig& model, int batch, int seq_len, int threads, bool with_loss, bool fp32) {
  StepArena step(model, batch, seq_len, threads, fp32, /*keep_probs=*/!with_loss);  // the probes' forwards: no loss
  step.upload_batch(with_loss);
  step.forward();
  if (with_loss) step.loss(false);
  return step.high_water();
}

ResourceEstimate estimate_resources(const RunConfig& cfg, Purpose purpose) {
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  const bool fp32 = t.precision == "fp32";
  ResourceEstimate e;
  e.purpose = purpose;
  e.threads = resolved_threads(cfg);
  // A generated Lano grammar is not built here (at the limits that takes seconds, and --dry-run is to be instant):
  // its size is the most its keys allow, and the rest the estimate asks of the task follows from the config.
  const bool generated_grammar = cfg.task.name == "lano" && cfg.task.lano.grammar == "generate";
  const std::unique_ptr<Task> task = generated_grammar ? nullptr : make_task(cfg.task);
  const TaskShape shape = task ? TaskShape{task->vocab_size(), task->seq_len()} : task_shape(cfg.task);
  const double B = t.batch_size, T = shape.seq_len;
  e.batch = t.batch_size;
  e.seq_len = shape.seq_len;
  e.seq_len_key = cfg.task.name == "copy" ? "task.n_symbols (T = 2n + 1)" : "task.context";
  e.parameters = count_parameters(m);
  const double P = double(e.parameters);
  const bool training = purpose == Purpose::train || purpose == Purpose::resume;
  const std::string model_keys = parameter_keys(m);
  const std::string seq_key = cfg.task.name == "copy" ? "task.n_symbols" : "task.context";

  using enum MemoryPhase;
  std::vector<MemoryItem>& items = e.items;
  auto add = [&](std::string what, double bytes, std::string keys, MemoryPhase phase) {
    if (bytes > 0) items.push_back({std::move(what), bytes, std::move(keys), phase});
  };
  add("process: binary, libraries, " + std::to_string(e.threads) + " OpenMP thread stacks and GEMM buffers",
      kProcessBaseBytes + kPerThreadBytes * e.threads, "train.threads", whole_run);
  add("parameters (fp32)", P * kFloat, model_keys, whole_run);
  add("gradients (fp32)", P * kFloat, model_keys, whole_run);
  const bool bf16 = t.precision == "bf16";
  if (bf16) add("bf16 shadow of the weights (the GEMMs' inputs, as fp32 values)", P * kFloat, model_keys, whole_run);
  if (training) add("AdamW moments m, v (fp32) and the weight-decay mask", P * (2 * kFloat + 1), model_keys, whole_run);
  if (purpose == Purpose::resume)
    add("resume: the model and optimizer checkpoint files, read whole", 3 * P * kFloat, model_keys, loading);
  if (purpose == Purpose::eval || purpose == Purpose::probe)
    add("checkpoint: the model file, read whole", P * kFloat, model_keys, loading);
  // A plain text file is held in memory whole; a data directory's shards are memory-mapped (page cache the kernel
  // reclaims, not resident memory), so only its tokenizer's tables count.
  if (const auto* text = dynamic_cast<const TextTask*>(task.get()))
    add(text->from_data_directory() ? "task data: the tokenizer's tables (token shards are memory-mapped, not resident)"
                                    : "task data: the text file, read whole",
        text->resident_bytes(), "task.text.path", whole_run);

  if (cfg.task.name == "lano") {
    const auto* lano = dynamic_cast<const LanoTask*>(task.get());
    const GrammarSize size = lano ? grammar_size(lano->grammar()) : generated_grammar_bound(cfg.task.lano);
    const std::string grammar_keys =
        lano ? "task.lano.grammar" : "task.lano.num_sym, task.lano.deg_max, task.lano.len_max, task.lano.depth";
    add(std::string("task data: the Lano grammar and its parser's productions") +
            (lano ? "" : " (generated: the most its keys allow)"),
        grammar_bytes(size), grammar_keys, whole_run);
    // lano_acc parses one generated sentence at a time; the sampler never goes past model.max_seq_len.
    const int sentence = std::min(lano_max_sentence(cfg.task), m.max_seq_len - 1);
    add("lano_acc: the parser's table for one generated sentence of up to " + std::to_string(sentence) + " tokens",
        parse_table_bytes(size, sentence), "task.lano.max_sentence, " + seq_key + ", " + grammar_keys, running);
  }

  const double suites = task ? double(task->eval_suites().size()) : 1.0;  // LanoTask: one suite
  const std::string batch_keys = "train.batch_size, " + seq_key;
  if (training) {
    // With micro-batches the arena holds one micro-batch's step, unless evaluating a whole batch needs more.
    const int micro_rows = t.batch_size / std::max(1, t.micro_batches);
    e.training_arena_bytes = training_arena_bytes(m, micro_rows, e.seq_len, e.threads, fp32);
    if (t.micro_batches > 1)
      e.training_arena_bytes = std::max(e.training_arena_bytes,
                                        forward_arena_bytes(m, t.batch_size, e.seq_len, e.threads, true, fp32));
    add(t.micro_batches > 1 ? "activation arena: one micro-batch's forward + backward (evaluation reuses it)"
                            : "activation arena: one training step, forward + backward (evaluation reuses it)",
        e.training_arena_bytes,
        arena_keys(m, B, T, e.threads, seq_key, e.training_arena_bytes) +
            (t.micro_batches > 1 ? ", train.micro_batches" : ""),
        running);
    add("training batch", batch_bytes(B, T), batch_keys, running);
    if (t.micro_batches > 1)
      add("gradient accumulation: the running sum of the micro-batches' gradients (fp32)", P * kFloat,
          model_keys + ", train.micro_batches", whole_run);
  } else {
    e.eval_arena_bytes = forward_arena_bytes(m, t.batch_size, e.seq_len, e.threads, true, fp32);
    add("activation arena: one evaluation forward pass", e.eval_arena_bytes,
        arena_keys(m, B, T, e.threads, seq_key, e.eval_arena_bytes), running);
  }
  if (bf16)  // inputs as floats: the emulated path's size, twice the native path's bf16 storage
    add("bf16 GEMM scratch (the largest GEMM's two inputs, converted, and a dense output)",
        bf16_gemm_scratch_elements(m, B * T) * kFloat, batch_keys + ", model.d_model, model.vocab_size", running);
  const int eval_batches = task ? task->eval_batch_count(t.eval_batches, t.batch_size) : t.eval_batches;
  add("held-out eval batches (" + std::to_string(int(suites)) + " suite" + (suites > 1 ? "s" : "") + " x " +
          std::to_string(eval_batches) + ")",
      suites * eval_batches * batch_bytes(B, T), "train.eval_batches, " + batch_keys, running);
  if (m.vocab_size > shape.vocab_size)
    add("eval logits cut to the task's vocabulary", B * T * shape.vocab_size * kFloat,
        "model.vocab_size, " + batch_keys, running);

  // The IPMR probe (copy task, models with attention) runs in an arena of its own, while the training or
  // evaluation arena is still held.
  const bool ipmr =
      dynamic_cast<const CopyTask*>(task.get()) && std::ranges::any_of(mixer_letters(m), is_attention_letter);
  const double probe_rows = std::min(B, double(cfg.probe.n_sequences));
  if (ipmr) {
    add("IPMR probe: its own forward arena and batch",
        forward_arena_bytes(m, int(probe_rows), e.seq_len, e.threads, false, fp32) + batch_bytes(probe_rows, T),
        "train.batch_size, probe.n_sequences, " + seq_key + ", model.d_model, model.n_layers", running);
    if (purpose == Purpose::probe) {
      // canonlab probe's pictures: the default 2 examples x 5 heads of T x T maps, kept as floats and as JSON.
      const double maps = 2.0 * 5 * T * T;
      add("attention maps of the probe (2 examples x 5 heads)",
          maps * (kFloat + 48) + forward_arena_bytes(m, 2, e.seq_len, e.threads, false, fp32),
          seq_key + ", model.d_model, model.n_layers", running);
    }
  }
  std::ranges::stable_sort(items, [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });

  double by_phase[3] = {};
  for (const MemoryItem& item : items) by_phase[size_t(item.phase)] += item.bytes;
  e.peak_bytes = by_phase[size_t(whole_run)] + std::max(by_phase[size_t(loading)], by_phase[size_t(running)]);

  e.tokens_per_step = B * T;
  e.flops_per_step = model_train_flops(m, t.batch_size, e.seq_len);
  const double forward_flops = e.flops_per_step / 3;  // one forward pass of a batch
  const double probe_forwards = ipmr ? double(cfg.probe.n_sequences) / B : 0;
  e.evaluations = training ? evaluation_count(t) : 1;
  e.total_flops = (training ? double(t.steps) * e.flops_per_step : 0) +
                  forward_flops * (e.evaluations * suites * eval_batches + probe_forwards);
  return e;
}

double available_memory_bytes() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  // cgroup v2: "0::/some/path" in /proc/self/cgroup names the group whose memory.max applies.
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    if (!line.starts_with("0::")) continue;
    const std::string dir = "/sys/fs/cgroup" + (line.size() > 3 && line.substr(3) != "/" ? line.substr(3) : "");
    const double max = read_number_file(dir + "/memory.max"), current = read_number_file(dir + "/memory.current");
    if (max > 0) {
      const double left = std::max(0.0, max - current);
      available = available > 0 ? std::min(available, left) : left;
    }
  }
  return available;
}

void check_resources(const ResourceEstimate& e, const RunConfig& cfg) {
  // Token positions of a step are indexed with int throughout the engine (B * T rows of every activation).
  if (e.tokens_per_step > 2147483647.0)
    throw Error("train.batch_size: " + std::to_string(e.batch) + " sequences of " + std::to_string(e.seq_len) +
                " tokens are " + format_count(e.tokens_per_step) + "tokens per step, more than the 2^31 - 1 the engine "
                "indexes; lower train.batch_size or " + e.seq_len_key);
  const double available = available_memory_bytes();
  const double configured = cfg.train.max_memory_gb * kGiB;
  double limit = 0;
  std::string against;
  if (available > 0) {
    limit = available;
    against = "the " + format_bytes(available) + " this machine has available (MemAvailable)";
  }
  if (configured > 0 && (limit == 0 || configured < limit)) {
    limit = configured;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", cfg.train.max_memory_gb);
    against = std::string("train.max_memory_gb = ") + buf + " (" + format_bytes(configured) + ")";
  }
  if (limit == 0 || e.peak_bytes <= limit) return;
  std::string parts;
  for (size_t i = 0; i < e.items.size() && i < 3; i++)
    parts += "\n  " + format_bytes(e.items[i].bytes) + "  " + e.items[i].what + "  <- " + e.items[i].keys;
  throw Error("this run needs an estimated " + format_bytes(e.peak_bytes) + " of memory at its peak, more than " +
              against + ". The largest parts and the keys that drive them:" + parts +
              "\nLower those keys (canonlab train CONFIG --dry-run prints the whole estimate; docs/resources.md)" +
              (configured > 0 ? "" : ", or free memory"));
}

TimeEstimate estimate_time(const ResourceEstimate& e, const RunConfig& cfg) {
  set_thread_count(cfg.train.threads);
  // A GEMM the shape of the model's q|k|v projection over the step's rows, capped (2 GFLOP a call) so that a huge
  // config is measured as quickly as a small one.
  const int rows = int(std::clamp(e.tokens_per_step, 256.0, 2048.0));
  const int in = std::clamp(cfg.model.d_model, 64, 512), out = std::clamp(3 * cfg.model.d_model, 64, 1024);
  std::vector<float> x(size_t(rows) * in, 0.5f), w(size_t(out) * in, 0.25f), y(size_t(rows) * out);
  linear_forward(y.data(), out, x.data(), in, w.data(), static_cast<const float*>(nullptr), rows, in, out);  // warm up
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int reps = 0;
  double elapsed = 0;
  while (reps < 1 || elapsed < 0.2) {
    linear_forward(y.data(), out, x.data(), in, w.data(), static_cast<const float*>(nullptr), rows, in, out);
    reps++;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  }
  TimeEstimate time;
  time.gemm_gflops = 2.0 * rows * in * out * reps / elapsed / 1e9;
  const std::string letters = mixer_letters(cfg.model);
  double efficiency = 0;
  for (char letter : letters) efficiency += step_efficiency(letter);
  time.efficiency = efficiency / double(letters.size());
  if (cfg.model.canon.set.find_first_of("ABCD") != std::string::npos) time.efficiency *= kCanonEfficiency;
  time.seconds = e.total_flops / (time.gemm_gflops * 1e9 * time.efficiency);
  return time;
}

std::string format_estimate(const ResourceEstimate& e, const RunConfig& cfg, const TimeEstimate* time) {
  const ModelConfig& m = cfg.model;
  std::ostringstream os;
  char buf[256];
  os << "model: " << m.family << (m.family == "hybrid" ? " " + m.layer_pattern : "") << ", " << m.n_layers
     << " layers, d_model " << m.d_model << ", " << m.n_heads << " heads, vocab " << m.vocab_size
     << (m.canon.set.empty() ? "" : ", Canon " + m.canon.set) << "\n";
  std::string short_count = format_count(double(e.parameters));
  while (short_count.ends_with(' ')) short_count.pop_back();
  os << "parameters: " << e.parameters << " (" << short_count << ")\n";
  std::snprintf(buf, sizeof buf, "step: %d sequences x %d tokens = %.0f tokens, %sFLOP (forward + backward)\n", e.batch,
                e.seq_len, e.tokens_per_step, format_count(e.flops_per_step).c_str());
  os << buf;
  os << "memory at the peak (estimated resident set, " << e.threads << " thread" << (e.threads > 1 ? "s" : "")
     << "):\n";
  for (const MemoryItem& item : e.items) {
    std::snprintf(buf, sizeof buf, "  %10s  ", format_bytes(item.bytes).c_str());
    os << buf << item.what
       << (item.phase == MemoryPhase::loading ? " [while the checkpoint is read, before the arenas]" : "")
       << "\n      <- " << item.keys << "\n";
  }
  os << "  total: " << format_bytes(e.peak_bytes);
  const double available = available_memory_bytes();
  if (available > 0) os << " of " << format_bytes(available) << " available";
  if (cfg.train.max_memory_gb > 0) os << " (train.max_memory_gb " << cfg.train.max_memory_gb << ")";
  os << "\n";
  if (time) {
    const bool training = e.purpose == Purpose::train || e.purpose == Purpose::resume;
    os << "time (an estimate): " << (training ? std::to_string(cfg.train.steps) + " steps and " : "")
       << e.evaluations << " evaluation" << (e.evaluations > 1 ? "s" : "") << ", " << format_count(e.total_flops)
       << "FLOP in all, ";
    std::snprintf(buf, sizeof buf,
                  "at %.0f GFLOP/s (this machine's GEMM, measured: %.0f GFLOP/s, x %.2f step efficiency)",
                  time->gemm_gflops * time->efficiency, time->gemm_gflops, time->efficiency);
    os << buf << ": about " << format_seconds(time->seconds) << "\n";
  }
  return os.str();
}

}  // namespace canonlab
