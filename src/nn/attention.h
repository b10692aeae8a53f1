#pragma once
// Causal multi-head attention, Llama style, with the options the induction experiments need:
//   positions: rope (optionally partial: rope_dim dims per head), nope, alibi, learned (added at the embedding)
//   scoring:   softmax of scaled q.k, or sign_ste: q, k replaced by sign() in forward, straight-through backward
//   key shift: the token-shift family at chosen layers (model.attention.key_shift.mode, docs/token-shift.md): before
//              the key projection (add: x[t] + x[t - o]; replace: x[t - o]) or on the projected keys (and values),
//              before Canon-B and positions (smeared, kv, partial: engine/ops/token_shift)
//   Canon-B:   a Canon layer over the concatenated q|k|v before positions are applied
//   window:    sliding window, a query at t sees keys t − w < s <= t (the model assembly picks the layers)
//   grouped-query attention: n_kv_heads key/value heads (model.n_kv_heads), each serving n_heads / n_kv_heads
//              consecutive query heads; k and v are repeated to n_heads heads just before the attention kernel
//              (engine/ops/repeat_heads), so the kernels, the probes and ALiBi see n_heads heads as without it
// q, k, v live as column blocks of one (B*T, W) buffer, W = C + 2·Ckv (Ckv = n_kv_heads · head_dim), so Canon-B sees
// the concatenation without copies.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/error.h"
#include "config/model_shapes.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/rope/rope.h"
#include "engine/ops/token_shift/element_kernels.h"
#include "nn/canon.h"
#include "nn/linear.h"
#include "nn/mixer.h"

namespace canonlab {

// ALiBi slopes, the one definition: the CPU ops and the CUDA kernels both read these (uploaded per step).
// model.attention.alibi_slopes (Press, Smith, Lewis 2022):
//   geometric: the paper's rule m_h = 2^(-8h/H), h = 1..H, for every H (the default).
//   press:     the reference code's get_slopes (ofirpress/attention_with_linear_biases; BLOOM, MPT and most public
//              ALiBi code). For H a power of two it is the paper's rule. Otherwise, with n the largest power of two
//              below H: the n slopes 2^(-8h/n), h = 1..n, then the first H - n of every other slope of the 2n-head
//              set, 2^(-8(2j-1)/(2n)), j = 1..H-n. H = 6: 1/4, 1/16, 1/64, 1/256, then 1/2, 1/8.
inline std::vector<double> alibi_slopes(int n_heads, const std::string& rule = "geometric") {
  CANONLAB_CHECK(rule == "geometric" || rule == "press",
                 "model.attention.alibi_slopes: '" + rule + "' is not allowed; allowed: geometric, press");
  int base = n_heads;  // the paper's rule over the first `base` heads
  if (rule == "press")
    while ((base & (base - 1)) != 0) base &= base - 1;  // clear low bits down to the highest power of two
  std::vector<double> s(size_t(std::max(n_heads, 0)));
  for (int h = 0; h < n_heads; h++)
    s[size_t(h)] = h < base ? std::pow(2.0, -8.0 * (h + 1) / base)
                            : std::pow(2.0, -8.0 * (2 * (h - base) + 1) / (2.0 * base));
  return s;
}

template <class T>
class Attention final : public SequenceMixer<T> {
 public:
  // window: 0 = full causal attention, w > 0 = sliding window of w keys. Not read from cfg.attention.window:
  // whether a layer is windowed is decided by the model assembly, which passes the size here.
  Attention(ParameterStore<T>& store, const std::string& name, int layer, const ModelConfig& cfg, int window = 0)
      : name_(name), state_name_(name + ".softmax_state"), layer_(layer), C_(cfg.d_model), H_(cfg.n_heads),
        D_(cfg.d_model / cfg.n_heads), Hkv_(attention_kv_heads(cfg)), Ckv_(attention_kv_width(cfg)),
        W_(attention_qkv_width(cfg)), group_(H_ / Hkv_), window_(window) {
    CANONLAB_CHECK(Hkv_ >= 1 && H_ % Hkv_ == 0, "model.n_kv_heads: " + std::to_string(Hkv_) +
                                                    " does not divide model.n_heads = " + std::to_string(H_));
    const AttentionConfig& a = cfg.attention;
    const KeyShiftConfig& ks = a.key_shift;
    if (std::find(ks.layers.begin(), ks.layers.end(), layer) != ks.layers.end()) {
      offset_ = ks.offset;
      shift_ = ks.mode == "replace" ? ShiftMode::replace : ks.mode == "smeared" ? ShiftMode::smeared
               : ks.mode == "kv"    ? ShiftMode::kv      : ks.mode == "partial" ? ShiftMode::partial
                                                                                 : ShiftMode::add;
      CANONLAB_CHECK(ks.mode == "add" || shift_ != ShiftMode::add,
                     "model.attention.key_shift.mode: '" + ks.mode + "' is not a key-shift mode");
      const bool dims = shift_ == ShiftMode::partial && ks.dims.size() == 2;
      k_shift_ = TokenShift{token_shift_kind(), offset_, dims ? ks.dims[0] : 0, dims ? ks.dims[1] : D_};
    }
    rope_ = a.position == "rope";
    rope_dim_ = a.rope_dim > 0 ? a.rope_dim : D_;
    rope_base_ = a.rope_base;
    sign_ste_ = a.scoring == "sign_ste";
    ste_clipped_ = a.ste_grad == "clipped";
    if (a.position == "alibi")
      for (double s : alibi_slopes(H_, a.alibi_slopes)) slopes_.push_back(T(s));
    q_proj_ = std::make_unique<Linear<T>>(store, name + ".q_proj", C_, C_, a.qkv_bias, cfg.init_std);
    k_proj_ = std::make_unique<Linear<T>>(store, name + ".k_proj", C_, Ckv_, a.qkv_bias, cfg.init_std);
    v_proj_ = std::make_unique<Linear<T>>(store, name + ".v_proj", C_, Ckv_, a.qkv_bias, cfg.init_std);
    if (cfg.canon.set.find('B') != std::string::npos)
      canon_b_ = std::make_unique<CanonLayer<T>>(store, name + ".canon_b", W_, cfg.canon, cfg.norm_eps);
    o_proj_ = std::make_unique<Linear<T>>(store, name + ".o_proj", C_, C_, a.qkv_bias, cfg.init_std);
    // The learned shifts' coefficients draw from the extra init streams: a model with them starts from the same
    // weights as without, for a seed, so variants compare paired. One coefficient per key/value head.
    if (shift_ == ShiftMode::smeared)  // σ(0) = 1/2: the key starts as the mean of k[t] and k[t − o]
      k_coef_ = store.add(name + ".key_shift.alpha", {Hkv_}, InitSpec::zeros(), ParamGroup::canon, InitStream::extra);
    if (shift_ == ShiftMode::kv) {  // Xu et al.: α1 ~ U(0, 1), α2 = 1 − α1 (and β likewise)
      k_coef_ = store.add(name + ".key_shift.k_mix", {2, Hkv_}, InitSpec::complementary_uniform(), ParamGroup::canon,
                          InitStream::extra);
      v_coef_ = store.add(name + ".key_shift.v_mix", {2, Hkv_}, InitSpec::complementary_uniform(), ParamGroup::canon,
                          InitStream::extra);
    }
  }

  void forward(StepContext<T>& ctx, T* y, const T* x, int B, int Tn) override {
    const int N = B * Tn, W = W_, K0 = C_, V0 = C_ + Ckv_;  // [q | k | v] columns: q at 0, k at K0, v at V0
    Backend<T>& be = ctx.backend;
    x_ = x;
    // Shifts before the key projection: it reads x[t] + x[t - o] (add) or x[t - o] (replace), zero before the start.
    xk_ = x;
    if (shift_ == ShiftMode::add || shift_ == ShiftMode::replace) {
      T* xs = ctx.arena.template alloc<T>(size_t(N) * C_);
      if (shift_ == ShiftMode::add) be.shift_add_forward(xs, x, B, Tn, C_, offset_);
      else be.token_shift_forward(xs, C_, x, C_, static_cast<const T*>(nullptr), input_shift(), B, Tn, 1, C_);
      xk_ = xs;
    }
    qkv_proj_ = ctx.arena.template alloc<T>(size_t(N) * W);  // (B, T, W) = [q | k | v]
    if (fused_qkv()) {
      gemm_weight_forward(be, qkv_proj_, W, x, C_, q_proj_->weight(), static_cast<const T*>(nullptr), N, C_, W);
    } else {
      q_proj_->forward(be, qkv_proj_, W, x, C_, N);
      k_proj_->forward(be, qkv_proj_ + K0, W, xk_, C_, N);
      v_proj_->forward(be, qkv_proj_ + V0, W, x, C_, N);
    }
    // Shifts of the projected keys (kv: and values); q as projected.
    qkv_shifted_ = qkv_proj_;
    if (shifts_projections()) {
      qkv_shifted_ = ctx.arena.template alloc<T>(size_t(N) * W);
      be.copy(qkv_shifted_, qkv_proj_, size_t(N) * W);
      be.token_shift_forward(qkv_shifted_ + K0, W, qkv_proj_ + K0, W, coef(k_coef_), k_shift_, B, Tn, Hkv_, D_);
      if (shift_ == ShiftMode::kv)
        be.token_shift_forward(qkv_shifted_ + V0, W, qkv_proj_ + V0, W, coef(v_coef_), k_shift_, B, Tn, Hkv_, D_);
    }
    qkv_canon_ = qkv_shifted_;
    if (canon_b_) {
      qkv_canon_ = ctx.arena.template alloc<T>(size_t(N) * W);
      canon_b_->forward(ctx, qkv_canon_, qkv_shifted_, B, Tn);
    }
    // Positions and sign act on q and k only; each stage gets its own copy because backward needs the
    // values before sign() for the clipped straight-through gradient.
    qkv_pos_ = qkv_canon_;
    if (rope_) {
      qkv_pos_ = ctx.arena.template alloc<T>(size_t(N) * W);
      be.copy(qkv_pos_, qkv_canon_, size_t(N) * W);
      be.rope_forward(qkv_pos_, W, B, Tn, H_, D_, rope_dim_, rope_base_);
      be.rope_forward(qkv_pos_ + K0, W, B, Tn, Hkv_, D_, rope_dim_, rope_base_);
    }
    qkv_score_ = qkv_pos_;
    if (sign_ste_) {
      qkv_score_ = ctx.arena.template alloc<T>(size_t(N) * W);
      be.sign_forward_rows(qkv_score_, W, qkv_pos_, W, N, V0);                 // q | k
      be.copy_rows(qkv_score_ + V0, W, qkv_pos_ + V0, W, N, Ckv_);             // v unchanged
    }
    // Grouped-query attention: k and v repeated to n_heads heads, (B, T, 3C), for the kernels.
    qkv_att_ = qkv_score_;
    if (group_ > 1) {
      qkv_att_ = ctx.arena.template alloc<T>(size_t(N) * 3 * C_);
      be.copy_rows(qkv_att_, 3 * C_, qkv_score_, W, N, C_);
      be.repeat_heads_forward(qkv_att_ + C_, 3 * C_, qkv_score_ + K0, W, N, 2 * Hkv_, group_, D_);  // k | v heads
    }
    const int LA = att_ld();
    // The slopes in device memory of their own, uploaded by the first forward pass (never inside a captured step:
    // a step's first run is eager), so a step reads them without a copy from the host.
    if (!slopes_.empty() && slopes_dev_.empty()) slopes_dev_ = DeviceBuffer<T>(ctx.arena.memory(), slopes_);
    attn_out_ = ctx.arena.template alloc<T>(size_t(N) * C_);
    const size_t n_state = be.attention_state_size(B, Tn, H_);
    state_ = ctx.arena.template alloc<T>(n_state);
    // The (B, H, T, T) probabilities exist only when a probe looks at them; training keeps the softmax state, which
    // grows with T, and the scratch is given back before the next module runs.
    const size_t n_probs = size_t(B) * H_ * Tn * Tn;
    T* probs = ctx.on_attention_probs ? ctx.arena.template alloc<T>(n_probs) : nullptr;
    const Arena::Mark before_scratch = ctx.arena.mark();
    T* scratch = ctx.arena.template alloc<T>(be.attention_scratch_size(Tn));
    be.attention_forward(attn_out_, state_, probs, qkv_att_, qkv_att_ + C_, qkv_att_ + 2 * C_, LA, slopes(), window_, B,
                         Tn, H_, D_, scale(), scratch);
    ctx.arena.release(before_scratch);
    if (probs) {
      std::vector<T> host;
      ctx.on_attention_probs(layer_, host_view(ctx.arena.memory(), probs, n_probs, host).data(), B, H_, Tn);
    }
    ctx.record(state_name_, state_, n_state);
    o_proj_->forward(be, y, C_, attn_out_, C_, N);
    ctx.record(name_, y, size_t(N) * C_);
  }

  void needs(std::vector<OpNeed>& out) const override {
    OpNeed need{OpGroup::attention, name_ + " (model.family / model.layer_pattern)", D_,
                "head dimension (model.d_model / model.n_heads)"};
    if (!slopes_.empty()) need.features.push_back({"alibi", "model.attention.position: alibi"});
    out.push_back(std::move(need));
    if (canon_b_) canon_b_->needs(out);
  }

  void backward(StepContext<T>& ctx, T* dx, const T* dy, int B, int Tn) override {
    const int N = B * Tn, W = W_, K0 = C_, V0 = C_ + Ckv_, LA = att_ld();
    Backend<T>& be = ctx.backend;
    T* dattn = ctx.arena.template alloc<T>(size_t(N) * C_);
    o_proj_->backward(be, dattn, C_, dy, C_, attn_out_, C_, N);
    T* dqkv = ctx.arena.template alloc<T>(size_t(N) * W);
    T* datt = group_ > 1 ? ctx.arena.template alloc<T>(size_t(N) * LA) : dqkv;  // (B, T, 3C) with repeated heads
    T* scratch = ctx.arena.template alloc<T>(be.attention_scratch_size(Tn));
    be.attention_backward(datt, datt + C_, datt + 2 * C_, LA, dattn, attn_out_, state_, qkv_att_, qkv_att_ + C_,
                          qkv_att_ + 2 * C_, LA, slopes(), window_, B, Tn, H_, D_, scale(), scratch);
    if (group_ > 1) {  // each key/value head collects its query heads' gradients
      be.copy_rows(dqkv, W, datt, LA, N, C_);
      be.repeat_heads_backward(dqkv + K0, W, datt + C_, LA, N, 2 * Hkv_, group_, D_);
    }
    if (sign_ste_) be.sign_ste_backward_rows(dqkv, W, dqkv, W, qkv_pos_, W, N, V0, ste_clipped_);
    if (rope_) {
      be.rope_backward(dqkv, W, B, Tn, H_, D_, rope_dim_, rope_base_);
      be.rope_backward(dqkv + K0, W, B, Tn, Hkv_, D_, rope_dim_, rope_base_);
    }
    T* dqkv_proj = dqkv;
    if (canon_b_) {
      dqkv_proj = ctx.arena.template alloc<T>(size_t(N) * W);
      canon_b_->backward(ctx, dqkv_proj, dqkv, B, Tn);
    }
    if (shifts_projections()) {  // forward's shift of the projections, transposed
      T* draw = ctx.arena.template alloc<T>(size_t(N) * W);
      be.copy(draw, dqkv_proj, size_t(N) * W);
      be.token_shift_backward(draw + K0, W, coef_grad(k_coef_), dqkv_proj + K0, W, qkv_proj_ + K0, W, coef(k_coef_),
                              k_shift_, B, Tn, Hkv_, D_);
      if (shift_ == ShiftMode::kv)
        be.token_shift_backward(draw + V0, W, coef_grad(v_coef_), dqkv_proj + V0, W, qkv_proj_ + V0, W, coef(v_coef_),
                                k_shift_, B, Tn, Hkv_, D_);
      dqkv_proj = draw;
    }
    if (fused_qkv()) {
      be.linear_backward(dx, C_, q_proj_->weight().grad(), static_cast<T*>(nullptr), dqkv_proj, W, x_, C_,
                         q_proj_->weight().gemm_value(), N, C_, W);
      return;
    }
    // x feeds q and v directly, and k through the key shift.
    T* dtmp = ctx.arena.template alloc<T>(size_t(N) * C_);
    q_proj_->backward(be, dx, C_, dqkv_proj, W, x_, C_, N);
    v_proj_->backward(be, dtmp, C_, dqkv_proj + V0, W, x_, C_, N);
    be.add_into(dx, dtmp, size_t(N) * C_);
    k_proj_->backward(be, dtmp, C_, dqkv_proj + K0, W, xk_, C_, N);
    if (shift_ == ShiftMode::add) {
      be.shift_add_backward(dx, dtmp, B, Tn, C_, offset_);
    } else if (shift_ == ShiftMode::replace) {
      T* dxs = ctx.arena.template alloc<T>(size_t(N) * C_);
      be.token_shift_backward(dxs, C_, static_cast<T*>(nullptr), dtmp, C_, x_, C_, static_cast<const T*>(nullptr),
                              input_shift(), B, Tn, 1, C_);
      be.add_into(dx, dxs, size_t(N) * C_);
    } else {
      be.add_into(dx, dtmp, size_t(N) * C_);
    }
  }

  // Decoding with a KV cache, on the host (host memory only): per sequence the keys and values so far (after Canon-B, positions and sign),
  // what the key shift needs (the last `offset` inputs for add and replace, the last `offset` projected keys, and
  // values for kv, for the others) and the Canon-B cache. Scores follow forward(): the same scale, ALiBi slopes and
  // window; the shifted element is token_shift_value, as in the forward kernel.
  struct State final : MixerDecodeState {
    struct Sequence {
      std::vector<T> keys, values;  // (t, Ckv) each: the n_kv_heads key/value heads
      std::vector<T> recent_inputs;  // (offset, C): x[t - offset .. t - 1], oldest first
      std::vector<T> recent_k, recent_v;  // (offset, Ckv): projected k (v) at t - offset .. t - 1, oldest first
      std::vector<T> canon_b;
    };
    std::vector<Sequence> seqs;
    int t = 0;
  };
  std::unique_ptr<MixerDecodeState> start_decode(int B) const override {
    auto s = std::make_unique<State>();
    s->seqs.resize(B);
    const bool inputs = shift_ == ShiftMode::add || shift_ == ShiftMode::replace;
    for (auto& q : s->seqs) {
      q.recent_inputs.assign(inputs ? size_t(offset_) * C_ : 0, T(0));
      q.recent_k.assign(shifts_projections() ? size_t(offset_) * Ckv_ : 0, T(0));
      q.recent_v.assign(shift_ == ShiftMode::kv ? size_t(offset_) * Ckv_ : 0, T(0));
      if (canon_b_) q.canon_b = canon_b_->new_cache();
    }
    return s;
  }
  void decode_step(MixerDecodeState& state, T* y, const T* x, int B) const override {
    State& s = static_cast<State&>(state);
    const int W = W_, K0 = C_, V0 = C_ + Ckv_, t = s.t;
    std::vector<T> xk(C_), qkv(W), mixed(W), out(size_t(B) * C_), scores;
    for (int b = 0; b < B; b++) {
      typename State::Sequence& seq = s.seqs[b];
      const T* xb = x + size_t(b) * C_;
      std::copy(xb, xb + C_, xk.begin());
      if (shift_ == ShiftMode::add || shift_ == ShiftMode::replace) {
        // x[t - o] is zeros until t >= offset, as in forward
        for (int c = 0; c < C_; c++) xk[c] = shift_ == ShiftMode::add ? xk[c] + seq.recent_inputs[c] : seq.recent_inputs[c];
        push_recent(seq.recent_inputs, xb, C_);
      }
      q_proj_->apply(qkv.data(), W, xb, C_, 1);
      k_proj_->apply(qkv.data() + K0, W, xk.data(), C_, 1);
      v_proj_->apply(qkv.data() + V0, W, xb, C_, 1);
      if (shifts_projections()) {
        shift_step(qkv.data() + K0, seq.recent_k, coef(k_coef_), t);
        if (shift_ == ShiftMode::kv) shift_step(qkv.data() + V0, seq.recent_v, coef(v_coef_), t);
      }
      if (canon_b_) canon_b_->step(mixed.data(), seq.canon_b, qkv.data());
      else mixed = qkv;
      if (rope_) {
        rope_forward_at(mixed.data(), t, H_, D_, rope_dim_, rope_base_);
        rope_forward_at(mixed.data() + K0, t, Hkv_, D_, rope_dim_, rope_base_);
      }
      if (sign_ste_) sign_forward(mixed.data(), mixed.data(), size_t(V0));
      seq.keys.insert(seq.keys.end(), mixed.begin() + K0, mixed.begin() + V0);
      seq.values.insert(seq.values.end(), mixed.begin() + V0, mixed.end());
      const int first = window_ > 0 ? std::max(0, t - window_ + 1) : 0;
      for (int h = 0; h < H_; h++) {
        const size_t kv = size_t(h / group_) * D_;  // the key/value head query head h reads
        scores.assign(size_t(t + 1), T(0));
        double mx = -1e300;
        for (int j = first; j <= t; j++) {
          double dot = 0;
          for (int d = 0; d < D_; d++) dot += double(mixed[h * D_ + d]) * double(seq.keys[size_t(j) * Ckv_ + kv + d]);
          double sc = double(scale()) * dot - (slopes_.empty() ? 0.0 : double(slopes_[h]) * (t - j));
          scores[j] = T(sc);
          mx = std::max(mx, sc);
        }
        double sum = 0;
        std::vector<double> p(size_t(t + 1), 0.0);
        for (int j = first; j <= t; j++) sum += p[j] = std::exp(double(scores[j]) - mx);
        T* o = out.data() + size_t(b) * C_ + h * D_;
        for (int d = 0; d < D_; d++) {
          double acc = 0;
          for (int j = first; j <= t; j++) acc += p[j] / sum * double(seq.values[size_t(j) * Ckv_ + kv + d]);
          o[d] = T(acc);
        }
      }
    }
    s.t++;
    o_proj_->apply(y, C_, out.data(), C_, B);
  }

  int layer() const { return layer_; }
  int n_heads() const { return H_; }
  int window() const { return window_; }

 private:
  T scale() const { return T(1.0 / std::sqrt(double(D_))); }
  enum class ShiftMode { none, add, replace, smeared, kv, partial };
  // The shifts of the projections (engine/ops/token_shift) as opposed to those of the key projection's input.
  bool shifts_projections() const {
    return shift_ == ShiftMode::smeared || shift_ == ShiftMode::kv || shift_ == ShiftMode::partial;
  }
  TokenShiftKind token_shift_kind() const {
    return shift_ == ShiftMode::smeared ? TokenShiftKind::smeared : shift_ == ShiftMode::kv ? TokenShiftKind::kv
           : shift_ == ShiftMode::partial ? TokenShiftKind::partial : TokenShiftKind::replace;
  }
  // replace: the key projection's input, all C channels as one head
  TokenShift input_shift() const { return TokenShift{TokenShiftKind::replace, offset_, 0, C_}; }
  static const T* coef(const Param<T>& p) { return p.store ? p.value() : nullptr; }
  static T* coef_grad(const Param<T>& p) { return p.store ? p.grad() : nullptr; }
  // Drops the oldest row of `width` values and appends `row`.
  static void push_recent(std::vector<T>& recent, const T* row, int width) {
    std::copy(recent.begin() + width, recent.end(), recent.begin());
    std::copy(row, row + width, recent.end() - width);
  }
  // One token's projected k (or v), its n_kv_heads heads shifted in place as forward's kernel does; `recent` keeps
  // the unshifted rows.
  void shift_step(T* row, std::vector<T>& recent, const T* c, int t) const {
    std::vector<T> raw(row, row + Ckv_);
    for (int h = 0; h < Hkv_; h++)
      for (int d = k_shift_.d0; d < k_shift_.d1; d++) {
        const int i = h * D_ + d;
        row[i] = token_shift_value(k_shift_.kind, c, h, Hkv_, raw[size_t(i)], recent[size_t(i)], t >= offset_);
      }
    push_recent(recent, raw.data(), Ckv_);
  }
  // Row stride of what the attention kernels read: [q | k | v] as projected, or with k and v repeated to n_heads.
  int att_ld() const { return group_ > 1 ? 3 * C_ : W_; }
  const T* slopes() const { return slopes_dev_.empty() ? nullptr : slopes_dev_.data(); }
  // Unless the key projection reads a shifted input, q, k and v read the same input: one GEMM against the
  // contiguous (3C, C) weights.
  bool fused_qkv() const {
    return shift_ != ShiftMode::add && shift_ != ShiftMode::replace && q_proj_->followed_in_memory_by(*k_proj_) &&
           k_proj_->followed_in_memory_by(*v_proj_);
  }

  std::string name_, state_name_;
  int layer_, C_, H_, D_;
  int Hkv_, Ckv_, W_, group_;  // key/value heads, their width, [q | k | v]'s width C + 2·Ckv, query heads per kv head
  int window_ = 0;  // 0 = full causal
  ShiftMode shift_ = ShiftMode::none;
  int offset_ = 0;
  TokenShift k_shift_{};                 // the projections' shift (smeared, kv, partial); kv shifts v alike
  Param<T> k_coef_, v_coef_;             // smeared: alpha (Hkv); kv: k_mix, v_mix (2, Hkv); else empty
  bool rope_ = false;
  int rope_dim_ = 0;
  double rope_base_ = 10000.0;
  bool sign_ste_ = false, ste_clipped_ = false;
  std::vector<T> slopes_;
  std::unique_ptr<Linear<T>> q_proj_, k_proj_, v_proj_, o_proj_;
  std::unique_ptr<CanonLayer<T>> canon_b_;
  // Saved for backward (arena memory of the current step).
  const T* x_ = nullptr;
  const T* xk_ = nullptr;
  T* qkv_proj_ = nullptr;
  T* qkv_shifted_ = nullptr;
  T* qkv_canon_ = nullptr;
  T* qkv_pos_ = nullptr;
  T* qkv_score_ = nullptr;
  T* qkv_att_ = nullptr;           // what the kernels read: qkv_score_, or it with k and v repeated (group_ > 1)
  T* attn_out_ = nullptr;
  T* state_ = nullptr;             // the softmax state attention_backward reads (Backend::attention_state_size)
  DeviceBuffer<T> slopes_dev_;     // ALiBi slopes in the backend's memory (empty without ALiBi)
};

}  // namespace canonlab
