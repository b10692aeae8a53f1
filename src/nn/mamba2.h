#pragma once
// Mamba2 (Dao & Gu 2024), docs/linear-families.md:
//   [z | xBC | dt] = in_proj(u)                   (Canon-B, if set, convolves this whole row)
//   xBC = silu(conv1d(xBC) + bias)                 with b (the paper's Canon-b); identity without ("noconv1d")
//   x, B, C = split(xBC);  dt = softplus(dt + dt_bias);  A = −exp(A_log)
//   h_t = exp(dt_t A) h_{t−1} + dt_t x_t ⊗ B_t;  y_t = h_t C_t + D x_t          (the SSD scan, per head)
//   out = out_proj( rmsnorm_grouped(y ⊙ silu(z)) ⊙ norm.weight )                (gate before the norm)
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/model_shapes.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "engine/ops/ssd/naive.h"
#include "nn/canon.h"
#include "nn/linear.h"
#include "nn/mixer.h"
#include "nn/short_conv.h"

namespace canonlab {

template <class T>
class Mamba2Mixer final : public SequenceMixer<T> {
 public:
  Mamba2Mixer(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg)
      : name_(name), C_(cfg.d_model), s_(mamba2_shape(cfg)), chunk_(cfg.recurrent.chunk_size),
        naive_(cfg.recurrent.kernel == "naive"), mimetic_(cfg.mamba2.init == "mimetic"), eps_(T(cfg.norm_eps)) {
    const Mamba2Config& m = cfg.mamba2;
    in_proj_ = std::make_unique<Linear<T>>(store, name + ".in_proj", C_, s_.d_in_proj, false, cfg.init_std);
    if (cfg.canon.set.find('B') != std::string::npos)
      canon_b_ = std::make_unique<CanonLayer<T>>(store, name + ".canon_b", s_.d_in_proj, cfg.canon, cfg.norm_eps);
    if (cfg.canon.set.find('b') != std::string::npos) {
      const int K = cfg.recurrent.conv_kernel;
      const InitSpec init = InitSpec::uniform(1.0 / std::sqrt(double(K)));  // PyTorch Conv1d default, fan_in = K
      conv_ = std::make_unique<ShortConv<T>>(store, name + ".conv1d", s_.conv_dim, K, true, true, init, init);
    }
    dt_bias_ = store.add(name + ".dt_bias", {s_.heads}, InitSpec::inverse_softplus_dt(m.dt_min, m.dt_max, m.dt_init_floor),
                         ParamGroup::ssm);
    A_log_ = store.add(name + ".A_log", {s_.heads}, InitSpec::log_uniform(m.a_min, m.a_max), ParamGroup::ssm);
    D_ = store.add(name + ".D", {s_.heads}, InitSpec::ones(), ParamGroup::ssm);
    norm_w_ = store.add(name + ".norm.weight", {s_.d_inner}, InitSpec::ones(), ParamGroup::norm);
    out_proj_ = std::make_unique<Linear<T>>(store, name + ".out_proj", s_.d_inner, C_, false, cfg.init_std);
  }

  // Mimetic init (Trockman et al. 2024), our reading of the Canon paper's ablation: decay close to 1 (A = −1/8),
  // dt close to 1 (dt_bias = 0.54), the C projection equal to the B projection (so C_t·B_s is an attention-like
  // x_t W_Bᵀ W_B x_s) and conv1d close to the identity (last tap 1, the rest 0, bias 0).
  void after_init(std::span<T> values) override {
    if (!mimetic_) return;
    for (int h = 0; h < s_.heads; h++) A_log_.in(values)[h] = T(std::log(1.0 / 8.0)), dt_bias_.in(values)[h] = T(0.54);
    T* w = in_proj_->weight().in(values);
    const int b_row = s_.d_inner + s_.d_inner, c_row = b_row + s_.groups * s_.d_state;
    std::copy(w + size_t(b_row) * C_, w + size_t(c_row) * C_, w + size_t(c_row) * C_);
    if (conv_) {
      T* cw = conv_->weight().in(values);
      const int K = int(conv_->weight().numel() / s_.conv_dim);
      for (int c = 0; c < s_.conv_dim; c++)
        for (int i = 0; i < K; i++) cw[size_t(c) * K + i] = T(i == K - 1 ? 1 : 0);
      std::fill(conv_->bias().in(values), conv_->bias().in(values) + s_.conv_dim, T(0));
    }
  }

  void forward(StepContext<T>& ctx, T* y, const T* u, int B, int Tn) override {
    const int N = B * Tn, Dp = s_.d_in_proj, Di = s_.d_inner, H = s_.heads, P = s_.headdim;
    const int GN = s_.groups * s_.d_state, CD = s_.conv_dim;
    Arena& a = ctx.arena;
    Backend<T>& be = ctx.backend;
    u_ = u;
    proj_ = a.template alloc<T>(size_t(N) * Dp);
    in_proj_->forward(be, proj_, Dp, u, C_, N);
    mixed_ = proj_;
    if (canon_b_) {
      mixed_ = a.template alloc<T>(size_t(N) * Dp);
      canon_b_->forward(ctx, mixed_, proj_, B, Tn);
    }
    // xBC rows: the conv output, or (without the conv) read in place from the columns of mixed_
    const T* xbc_rows = mixed_ + Di;
    int ld_xbc = Dp;
    if (conv_) {
      xbc_ = a.template alloc<T>(size_t(N) * CD);
      conv_->forward(ctx, xbc_, CD, mixed_ + Di, Dp, B, Tn);
      xbc_rows = xbc_, ld_xbc = CD;
    }
    x_ = a.template alloc<T>(size_t(N) * Di);
    Bm_ = a.template alloc<T>(size_t(N) * GN);
    Cm_ = a.template alloc<T>(size_t(N) * GN);
    z_ = a.template alloc<T>(size_t(N) * Di);
    dt_ = a.template alloc<T>(size_t(N) * H);
    be.mamba2_split_forward(x_, Bm_, Cm_, z_, dt_, xbc_rows, ld_xbc, mixed_, dt_bias_.value(), N, Dp, Di, GN, CD, H);
    A_ = a.template alloc<T>(H);
    be.ssd_decay_rates(A_, A_log_.value(), H);
    ssm_out_ = a.template alloc<T>(size_t(N) * Di);
    if (naive_) {
      if (!be.counts_only())  // the resource estimate's backend: allocations only
        canonlab::ssd_forward_naive(ssm_out_, x_, dt_, A_, Bm_, Cm_, B, Tn, H, P, s_.groups, s_.d_state);
    } else {
      states_ = a.template alloc<T>(be.ssd_states_size(B, Tn, H, P, s_.d_state, chunk_));
      be.ssd_forward_chunked(ssm_out_, states_, x_, dt_, A_, Bm_, Cm_, B, Tn, H, P, s_.groups, s_.d_state, chunk_);
    }
    be.mamba2_skip_forward(ssm_out_, D_.value(), x_, N, H, P);
    rstd_ = a.template alloc<T>(size_t(N) * s_.groups);
    normed_ = a.template alloc<T>(size_t(N) * Di);
    be.gated_rmsnorm_forward(normed_, rstd_, ssm_out_, z_, norm_w_.value(), N, s_.groups, Di / s_.groups, Di, eps_,
                             GateOrder::gate_then_norm);
    out_proj_->forward(be, y, C_, normed_, Di, N);
    ctx.record(name_, y, size_t(N) * C_);
  }

  void needs(std::vector<OpNeed>& out) const override {
    out.push_back({OpGroup::mamba2, name_ + " (model.family / model.layer_pattern)"});
    if (naive_) out.push_back({OpGroup::reference_scans, name_ + " (model.recurrent.kernel: naive)"});
    if (canon_b_) canon_b_->needs(out);
  }

  void backward(StepContext<T>& ctx, T* du, const T* dout, int B, int Tn) override {
    const int N = B * Tn, Dp = s_.d_in_proj, Di = s_.d_inner, H = s_.heads, P = s_.headdim;
    const int GN = s_.groups * s_.d_state, CD = s_.conv_dim;
    Arena& a = ctx.arena;
    Backend<T>& be = ctx.backend;
    T* dnormed = a.template alloc<T>(size_t(N) * Di);
    out_proj_->backward(be, dnormed, Di, dout, C_, normed_, Di, N);
    T* dy = a.template alloc<T>(size_t(N) * Di);
    T* dz = a.template alloc<T>(size_t(N) * Di);
    be.gated_rmsnorm_backward(dy, dz, norm_w_.grad(), dnormed, ssm_out_, z_, norm_w_.value(), rstd_, N, s_.groups,
                              Di / s_.groups, Di, GateOrder::gate_then_norm);
    T* dx = a.template alloc<T>(size_t(N) * Di);
    T* ddt = a.template alloc<T>(size_t(N) * H);
    T* dB = a.template alloc<T>(size_t(N) * GN);
    T* dC = a.template alloc<T>(size_t(N) * GN);
    T* dA = a.template alloc<T>(H);
    if (!naive_)
      be.ssd_backward_chunked(dx, ddt, dA, dB, dC, dy, states_, x_, dt_, A_, Bm_, Cm_, B, Tn, H, P, s_.groups,
                              s_.d_state, chunk_);
    else if (!be.counts_only())  // the resource estimate's backend: allocations only
      canonlab::ssd_backward_naive(dx, ddt, dA, dB, dC, dy, x_, dt_, A_, Bm_, Cm_, B, Tn, H, P, s_.groups,
                                   s_.d_state);
    be.ssd_decay_rates_backward(A_log_.grad(), dA, A_, H);  // A = −exp(A_log)
    // Reassemble the gradient of the (canon-mixed) in_proj row [z | xBC | dt], adding the D skip (y += D·x) to dx
    // on the way. Without the conv, dxBC goes straight into its columns of dmixed.
    T* dmixed = a.template alloc<T>(size_t(N) * Dp);
    T* dxbc = conv_ ? a.template alloc<T>(size_t(N) * CD) : nullptr;
    be.mamba2_split_backward(conv_ ? dxbc : dmixed + Di, conv_ ? CD : Dp, dmixed, dt_bias_.grad(), D_.grad(), dx, dy,
                             dB, dC, dz, ddt, mixed_, dt_bias_.value(), D_.value(), x_, N, Dp, Di, GN, CD, H, P);
    if (conv_) conv_->backward(ctx, dmixed + Di, Dp, dxbc, CD, B, Tn);
    const T* dproj = dmixed;
    if (canon_b_) {
      T* d = a.template alloc<T>(size_t(N) * Dp);
      canon_b_->backward(ctx, d, dmixed, B, Tn);
      dproj = d;
    }
    in_proj_->backward(be, du, C_, dproj, Dp, u_, C_, N);
  }

  // Decoding on the host (host memory only).
  struct State final : MixerDecodeState {
    std::vector<std::vector<T>> canon_b, conv;  // per sequence
    std::vector<T> h;                           // (B, H, P, N)
  };
  std::unique_ptr<MixerDecodeState> start_decode(int B) const override {
    auto s = std::make_unique<State>();
    for (int b = 0; b < B; b++) {
      if (canon_b_) s->canon_b.push_back(canon_b_->new_cache());
      if (conv_) s->conv.push_back(conv_->new_cache());
    }
    s->h.assign(size_t(B) * s_.heads * s_.headdim * s_.d_state, T(0));
    return s;
  }
  void decode_step(MixerDecodeState& state, T* y, const T* u, int B) const override {
    State& s = static_cast<State&>(state);
    const int Dp = s_.d_in_proj, Di = s_.d_inner, H = s_.heads, P = s_.headdim, GN = s_.groups * s_.d_state;
    std::vector<T> proj(size_t(B) * Dp), row(Dp), xbc(s_.conv_dim), dt(H), A(H), ssm(size_t(B) * Di), z(size_t(B) * Di);
    in_proj_->apply(proj.data(), Dp, u, C_, B);
    for (int h = 0; h < H; h++) A[h] = T(-std::exp(double(A_log_.value()[h])));
    for (int b = 0; b < B; b++) {
      if (canon_b_) canon_b_->step(row.data(), s.canon_b[b], proj.data() + size_t(b) * Dp);
      else std::copy(proj.begin() + size_t(b) * Dp, proj.begin() + size_t(b + 1) * Dp, row.begin());
      if (conv_) conv_->step(xbc.data(), s.conv[b], row.data() + Di);
      else std::copy(row.begin() + Di, row.begin() + Di + s_.conv_dim, xbc.begin());
      for (int h = 0; h < H; h++) dt[h] = T(softplus(double(row[Di + s_.conv_dim + h]) + double(dt_bias_.value()[h])));
      T* yb = ssm.data() + size_t(b) * Di;
      ssd_step(yb, s.h.data() + size_t(b) * H * P * s_.d_state, xbc.data(), dt.data(), A.data(), xbc.data() + Di,
               xbc.data() + Di + GN, H, P, s_.groups, s_.d_state);
      for (int h = 0; h < H; h++)
        for (int p = 0; p < P; p++) yb[h * P + p] += D_.value()[h] * xbc[h * P + p];
      std::copy(row.begin(), row.begin() + Di, z.begin() + size_t(b) * Di);
    }
    std::vector<T> rstd(size_t(B) * s_.groups), normed(size_t(B) * Di);
    canonlab::gated_rmsnorm_forward(normed.data(), rstd.data(), ssm.data(), z.data(), norm_w_.value(), B, s_.groups,
                                    Di / s_.groups, Di, eps_, GateOrder::gate_then_norm);
    out_proj_->apply(y, C_, normed.data(), Di, B);
  }

 private:
  std::string name_;
  int C_;
  Mamba2Shape s_;
  int chunk_;
  bool naive_, mimetic_;
  T eps_;
  std::unique_ptr<Linear<T>> in_proj_, out_proj_;
  std::unique_ptr<CanonLayer<T>> canon_b_;
  std::unique_ptr<ShortConv<T>> conv_;
  Param<T> dt_bias_, A_log_, D_, norm_w_;
  const T* u_ = nullptr;
  T* A_ = nullptr;  // (H) = −exp(A_log), this step's
  T *proj_ = nullptr, *mixed_ = nullptr, *xbc_ = nullptr, *x_ = nullptr, *Bm_ = nullptr, *Cm_ = nullptr;
  T *z_ = nullptr, *dt_ = nullptr, *ssm_out_ = nullptr, *states_ = nullptr, *rstd_ = nullptr, *normed_ = nullptr;
};

}  // namespace canonlab
