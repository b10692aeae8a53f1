#pragma once
// Gated Linear Attention (Yang et al. 2024; fla's GatedLinearAttention), docs/linear-families.md:
//   q, k, v = QkvInputs(x)                      projections, optional short conv (b) and Canon-B
//   q, k = φ(q), φ(k)                            feature map: none | elu_plus_one | relu | silu
//   gk = max(logsigmoid(gk_up(gk_down(x))) / normalizer, clamp_min)   per key channel, log space
//   S_t = diag(exp(gk_t)) S_{t−1} + k_t v_tᵀ;  o_t = K^{−1/2} S_tᵀ q_t
//   y = GatedOutput(o, x)
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/model_shapes.h"
#include "engine/ops/gla/gates.h"
#include "engine/ops/gla/naive.h"
#include "nn/gated_output.h"
#include "nn/mixer.h"
#include "nn/qkv_inputs.h"

namespace canonlab {

template <class T>
class GlaMixer final : public SequenceMixer<T> {
 public:
  GlaMixer(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg)
      : name_(name), C_(cfg.d_model), H_(cfg.n_heads), chunk_(cfg.recurrent.chunk_size),
        naive_(cfg.recurrent.kernel == "naive"), normalizer_(cfg.gla.gate_logit_normalizer),
        clamp_min_(cfg.gla.clamp_min), rank_(cfg.gla.gate_low_rank_dim) {
    const QkvShape s = qkv_shape(cfg, 'G');
    Kd_ = s.key_width, Vd_ = s.value_width, K_ = s.head_k, V_ = s.head_v;
    const std::string& fm = cfg.gla.feature_map;
    feature_map_ = fm == "elu_plus_one" ? FeatureMap::elu_plus_one
                   : fm == "relu"       ? FeatureMap::relu
                   : fm == "silu"       ? FeatureMap::silu
                                        : FeatureMap::none;
    inputs_ = std::make_unique<QkvInputs<T>>(store, name, cfg, Kd_, Vd_, false);
    gk_down_ = std::make_unique<Linear<T>>(store, name + ".gk_down", C_, rank_, false, cfg.init_std);
    gk_up_ = std::make_unique<Linear<T>>(store, name + ".gk_up", rank_, Kd_, true, cfg.init_std);
    output_ = std::make_unique<GatedOutput<T>>(store, name, cfg, Vd_, H_, cfg.gla.output_gate);
  }

  void forward(StepContext<T>& ctx, T* y, const T* x, int B, int Tn) override {
    const int N = B * Tn;
    Arena& a = ctx.arena;
    Backend<T>& be = ctx.backend;
    x_ = x;
    qkv_ = inputs_->forward(ctx, x, B, Tn);
    q_ = a.template alloc<T>(size_t(N) * Kd_);
    k_ = a.template alloc<T>(size_t(N) * Kd_);
    v_ = a.template alloc<T>(size_t(N) * Vd_);
    be.gla_feature_forward(q_, k_, v_, qkv_, N, Kd_, Vd_, feature_map_);
    gk_low_ = a.template alloc<T>(size_t(N) * rank_);
    gk_down_->forward(be, gk_low_, rank_, x, C_, N);
    gk_logit_ = a.template alloc<T>(size_t(N) * Kd_);
    gk_up_->forward(be, gk_logit_, Kd_, gk_low_, rank_, N);
    gk_ = a.template alloc<T>(size_t(N) * Kd_);
    be.gla_gate_forward(gk_, gk_logit_, size_t(N) * Kd_, normalizer_, clamp_min_);
    o_ = a.template alloc<T>(size_t(N) * Vd_);
    if (naive_) {
      if (!be.counts_only())  // the resource estimate's backend: allocations only
        canonlab::gla_forward_naive(o_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale());
    } else {
      states_ = a.template alloc<T>(be.gla_states_size(B, Tn, H_, K_, V_, chunk_));
      be.gla_forward_chunked(o_, states_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale(), chunk_);
    }
    output_->forward(ctx, y, o_, x, N);
    ctx.record(name_, y, size_t(N) * C_);
  }

  void needs(std::vector<OpNeed>& out) const override {
    out.push_back({OpGroup::gla, name_ + " (model.family / model.layer_pattern)"});
    if (naive_) out.push_back({OpGroup::reference_scans, name_ + " (model.recurrent.kernel: naive)"});
    inputs_->needs(out);
  }

  void backward(StepContext<T>& ctx, T* dx, const T* dy, int B, int Tn) override {
    const int N = B * Tn, W = inputs_->width();
    Arena& a = ctx.arena;
    Backend<T>& be = ctx.backend;
    be.fill_zero(dx, size_t(N) * C_);
    T* do_ = a.template alloc<T>(size_t(N) * Vd_);
    output_->backward(ctx, do_, dx, dy, N);
    T* dq = a.template alloc<T>(size_t(N) * Kd_);
    T* dk = a.template alloc<T>(size_t(N) * Kd_);
    T* dv = a.template alloc<T>(size_t(N) * Vd_);
    T* dg = a.template alloc<T>(size_t(N) * Kd_);
    if (!naive_)
      be.gla_backward_chunked(dq, dk, dv, dg, do_, states_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale(), chunk_);
    else if (!be.counts_only())  // the resource estimate's backend: allocations only
      canonlab::gla_backward_naive(dq, dk, dv, dg, do_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale());
    // gate: gk = clamp(logsigmoid(l) / normalizer)
    T* dlogit = a.template alloc<T>(size_t(N) * Kd_);
    be.gla_gate_backward(dlogit, dg, gk_logit_, size_t(N) * Kd_, normalizer_, clamp_min_);
    T* dlow = a.template alloc<T>(size_t(N) * rank_);
    gk_up_->backward(be, dlow, rank_, dlogit, Kd_, gk_low_, rank_, N);
    T* dtmp = a.template alloc<T>(size_t(N) * C_);
    gk_down_->backward(be, dtmp, C_, dlow, rank_, x_, C_, N);
    be.add_into(dx, dtmp, size_t(N) * C_);
    // feature maps back onto the q|k|v buffer
    T* dqkv = a.template alloc<T>(size_t(N) * W);
    be.gla_feature_backward(dqkv, dq, dk, dv, qkv_, N, Kd_, Vd_, feature_map_);
    inputs_->backward(ctx, dtmp, dqkv, B, Tn);
    be.add_into(dx, dtmp, size_t(N) * C_);
  }

  // Decoding on the host (host memory only).
  using State = LinearAttentionDecodeState<T>;
  std::unique_ptr<MixerDecodeState> start_decode(int B) const override {
    return std::make_unique<State>(*inputs_, B, size_t(H_) * K_ * V_);
  }
  void decode_step(MixerDecodeState& state, T* y, const T* x, int B) const override {
    State& s = static_cast<State&>(state);
    const int W = inputs_->width();
    std::vector<T> qkv(W), q(Kd_), k(Kd_), low(rank_), logit(Kd_), g(Kd_), o(size_t(B) * Vd_);
    for (int b = 0; b < B; b++) {
      const T* xb = x + size_t(b) * C_;
      inputs_->step(qkv.data(), s.inputs[b], xb);
      for (int c = 0; c < Kd_; c++)
        q[c] = gla_feature(qkv[c], feature_map_), k[c] = gla_feature(qkv[Kd_ + c], feature_map_);
      gk_down_->apply(low.data(), rank_, xb, C_, 1);
      gk_up_->apply(logit.data(), Kd_, low.data(), rank_, 1);
      for (int c = 0; c < Kd_; c++) g[c] = gla_forget_gate(logit[c], normalizer_, clamp_min_);
      gla_step(o.data() + size_t(b) * Vd_, s.S.data() + size_t(b) * H_ * K_ * V_, q.data(), k.data(),
               qkv.data() + 2 * Kd_, g.data(), H_, K_, V_, scale());
    }
    output_->apply(y, o.data(), x, B);
  }

 private:
  T scale() const { return T(1.0 / std::sqrt(double(K_))); }

  std::string name_;
  int C_, H_, chunk_;
  bool naive_;
  double normalizer_, clamp_min_;
  int rank_;
  int Kd_ = 0, Vd_ = 0, K_ = 0, V_ = 0;
  FeatureMap feature_map_;
  std::unique_ptr<QkvInputs<T>> inputs_;
  std::unique_ptr<Linear<T>> gk_down_, gk_up_;
  std::unique_ptr<GatedOutput<T>> output_;
  const T* x_ = nullptr;
  const T* qkv_ = nullptr;
  T *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *gk_low_ = nullptr, *gk_logit_ = nullptr, *gk_ = nullptr;
  T *o_ = nullptr, *states_ = nullptr;
};

}  // namespace canonlab
