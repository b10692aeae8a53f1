#pragma once
// Pre-norm residual block:
//   x_mid = x + Mixer( [CanonA] Norm(x) )
//   x_out = x_mid + Mlp( [CanonC] Norm(x_mid) )      (absent for Mamba2 layers without model.mamba2.mlp)
// Canon-A and Canon-C sit after the norms, before any nonlinearity (paper, App. C.2). The mixer is any
// SequenceMixer: attention, Mamba2, GLA, Gated DeltaNet, DeltaNet.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/canon.h"
#include "nn/mixer.h"
#include "nn/mlp.h"
#include "nn/norm.h"

namespace canonlab {

template <class T>
class Block {
 public:
  // What the block needs from the backend beyond the core ops: its mixer's and its Canon layers'.
  void needs(std::vector<OpNeed>& out) const {
    mixer_->needs(out);
    if (canon_a_) canon_a_->needs(out);
    if (canon_c_) canon_c_->needs(out);
    if (mlp_) mlp_->needs(out);
  }

  using MixerFactory = std::function<std::unique_ptr<SequenceMixer<T>>(ParameterStore<T>&)>;

  // Parameters register in the order attn_norm, canon_a, the mixer (make_mixer names it), mlp_norm, canon_c, mlp.
  Block(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg, const MixerFactory& make_mixer,
        bool with_mlp)
      : C_(cfg.d_model) {
    const NormKind nk = parse_norm_kind(cfg.norm);
    attn_norm_ = std::make_unique<Norm<T>>(store, name + ".attn_norm", C_, nk, cfg.norm_eps);
    if (cfg.canon.set.find('A') != std::string::npos)
      canon_a_ = std::make_unique<CanonLayer<T>>(store, name + ".canon_a", C_, cfg.canon, cfg.norm_eps);
    mixer_ = make_mixer(store);
    if (!with_mlp) return;
    mlp_norm_ = std::make_unique<Norm<T>>(store, name + ".mlp_norm", C_, nk, cfg.norm_eps);
    if (cfg.canon.set.find('C') != std::string::npos)
      canon_c_ = std::make_unique<CanonLayer<T>>(store, name + ".canon_c", C_, cfg.canon, cfg.norm_eps);
    mlp_ = std::make_unique<Mlp<T>>(store, name + ".mlp", cfg);
  }

  SequenceMixer<T>& mixer() { return *mixer_; }
  const SequenceMixer<T>& mixer() const { return *mixer_; }

  // x: (B, T, C) -> out: (B, T, C); x must stay alive until backward.
  void forward(StepContext<T>& ctx, T* out, const T* x, int B, int Tn) {
    const size_t n = size_t(B) * Tn * C_;
    Arena& a = ctx.arena;
    h1_ = a.template alloc<T>(n);
    attn_norm_->forward(ctx, h1_, x, B * Tn);
    h1c_ = h1_;
    if (canon_a_) {
      h1c_ = a.template alloc<T>(n);
      canon_a_->forward(ctx, h1c_, h1_, B, Tn);
    }
    T* y = a.template alloc<T>(n);
    mixer_->forward(ctx, y, h1c_, B, Tn);
    if (!mlp_) {
      ctx.backend.add(out, x, y, n);
      return;
    }
    x_mid_ = a.template alloc<T>(n);
    h2_ = a.template alloc<T>(n);
    mlp_norm_->forward_after_add(ctx, x_mid_, h2_, x, y, B * Tn);  // x_mid = x + y, h2 = norm(x_mid)
    h2c_ = h2_;
    if (canon_c_) {
      h2c_ = a.template alloc<T>(n);
      canon_c_->forward(ctx, h2c_, h2_, B, Tn);
    }
    T* y2 = a.template alloc<T>(n);  // not y: the trace keeps pointing at the mixer's output
    mlp_->forward(ctx, y2, h2c_, B, Tn);
    ctx.backend.add(out, x_mid_, y2, n);
  }

  // dout: (B, T, C) -> dx: (B, T, C) written
  void backward(StepContext<T>& ctx, T* dx, const T* dout, int B, int Tn) {
    const size_t n = size_t(B) * Tn * C_;
    Arena& a = ctx.arena;
    const Arena::Mark temporaries = a.mark();
    T* dx_mid = a.template alloc<T>(n);
    if (mlp_) {
      mlp_backward(ctx, dx_mid, dout, B, Tn);
    } else {
      ctx.backend.copy(dx_mid, dout, n);
    }
    T* dh1c = a.template alloc<T>(n);
    mixer_->backward(ctx, dh1c, dx_mid, B, Tn);
    T* dh1 = dh1c;
    if (canon_a_) {
      dh1 = a.template alloc<T>(n);
      canon_a_->backward(ctx, dh1, dh1c, B, Tn);
    }
    attn_norm_->backward_add(ctx, dx, dh1, dx_mid, B * Tn);  // dx = attn_norm'(dh1) + dx_mid
    a.release(temporaries);
  }

  // Decoding on the host (host memory only, fp32 weights), one token per row: the mixer's state and, per row, the
  // caches of Canon-A, Canon-C and the MLP's Canon-D (empty where the block has no such layer).
  struct DecodeState {
    std::unique_ptr<MixerDecodeState> mixer;
    std::vector<std::vector<T>> canon_a, canon_c, mlp;
  };
  DecodeState start_decode(int B) const {
    DecodeState s;
    s.mixer = mixer_->start_decode(B);
    for (int b = 0; b < B; b++) {
      if (canon_a_) s.canon_a.push_back(canon_a_->new_cache());
      if (canon_c_) s.canon_c.push_back(canon_c_->new_cache());
      if (mlp_) s.mlp.push_back(mlp_->new_cache());
    }
    return s;
  }
  // x: (B, C) -> out: (B, C), the rows of forward()'s output at the next position.
  void decode_step(DecodeState& s, T* out, const T* x, int B) const {
    const size_t n = size_t(B) * C_;
    std::vector<T> h(n), hc(n), y(n);
    attn_norm_->apply(h.data(), x, B);
    if (canon_a_) {
      for (int b = 0; b < B; b++) canon_a_->step(hc.data() + size_t(b) * C_, s.canon_a[b], h.data() + size_t(b) * C_);
    } else {
      hc = h;
    }
    mixer_->decode_step(*s.mixer, y.data(), hc.data(), B);
    if (!mlp_) {
      for (size_t i = 0; i < n; i++) out[i] = x[i] + y[i];
      return;
    }
    std::vector<T> x_mid(n);
    for (size_t i = 0; i < n; i++) x_mid[i] = x[i] + y[i];
    mlp_norm_->apply(h.data(), x_mid.data(), B);
    if (canon_c_) {
      for (int b = 0; b < B; b++) canon_c_->step(hc.data() + size_t(b) * C_, s.canon_c[b], h.data() + size_t(b) * C_);
    } else {
      hc = h;
    }
    mlp_->step(y.data(), s.mlp, hc.data(), B);
    for (size_t i = 0; i < n; i++) out[i] = x_mid[i] + y[i];
  }

 private:
  // dout: (B, T, C) -> dx_mid = dout + d(MLP half)/dx_mid, written.
  void mlp_backward(StepContext<T>& ctx, T* dx_mid, const T* dout, int B, int Tn) {
    const size_t n = size_t(B) * Tn * C_;
    Arena& a = ctx.arena;
    T* dh2c = a.template alloc<T>(n);
    mlp_->backward(ctx, dh2c, dout, B, Tn);
    T* dh2 = dh2c;
    if (canon_c_) {
      dh2 = a.template alloc<T>(n);
      canon_c_->backward(ctx, dh2, dh2c, B, Tn);
    }
    mlp_norm_->backward_add(ctx, dx_mid, dh2, dout, B * Tn);  // dx_mid = mlp_norm'(dh2) + dout
  }

  int C_;
  std::unique_ptr<Norm<T>> attn_norm_, mlp_norm_;
  std::unique_ptr<CanonLayer<T>> canon_a_, canon_c_;
  std::unique_ptr<SequenceMixer<T>> mixer_;
  std::unique_ptr<Mlp<T>> mlp_;
  T* h1_ = nullptr;
  T* h1c_ = nullptr;
  T* x_mid_ = nullptr;
  T* h2_ = nullptr;
  T* h2c_ = nullptr;
};

}  // namespace canonlab
