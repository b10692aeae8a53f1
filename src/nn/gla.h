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
#include "engine/ops/gla/chunked.h"
#include "engine/ops/gla/naive.h"
#include "nn/gated_output.h"
#include "nn/mixer.h"
#include "nn/qkv_inputs.h"

namespace canonlab {

enum class FeatureMap { none, elu_plus_one, relu, silu };

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
    const int N = B * Tn, W = inputs_->width();
    Arena& a = ctx.arena;
    x_ = x;
    qkv_ = inputs_->forward(ctx, x, B, Tn);
    q_ = a.template alloc<T>(size_t(N) * Kd_);
    k_ = a.template alloc<T>(size_t(N) * Kd_);
    v_ = a.template alloc<T>(size_t(N) * Vd_);
    {
      const int Kd = Kd_, Vd = Vd_;
      const T* qkv = qkv_;
      T *q = q_, *k = k_, *v = v_;
#pragma omp parallel for schedule(static)
      for (int n = 0; n < N; n++) {
        const T* row = qkv + size_t(n) * W;
        T* qr = q + size_t(n) * Kd;
        T* kr = k + size_t(n) * Kd;
        switch (feature_map_) {  // hoisted so that each case's loop vectorises
          case FeatureMap::none:
            std::copy(row, row + Kd, qr), std::copy(row + Kd, row + 2 * Kd, kr);
            break;
          case FeatureMap::elu_plus_one:
            for (int c = 0; c < Kd; c++) qr[c] = elu_plus_one(row[c]), kr[c] = elu_plus_one(row[Kd + c]);
            break;
          case FeatureMap::relu:
            for (int c = 0; c < Kd; c++) qr[c] = row[c] > T(0) ? row[c] : T(0), kr[c] = row[Kd + c] > T(0) ? row[Kd + c] : T(0);
            break;
          case FeatureMap::silu:
            for (int c = 0; c < Kd; c++)
              qr[c] = row[c] * sigmoid(row[c]), kr[c] = row[Kd + c] * sigmoid(row[Kd + c]);
            break;
        }
        std::copy(row + 2 * Kd, row + W, v + size_t(n) * Vd);
      }
    }
    gk_low_ = a.template alloc<T>(size_t(N) * rank_);
    gk_down_->forward(gk_low_, rank_, x, C_, N);
    gk_logit_ = a.template alloc<T>(size_t(N) * Kd_);
    gk_up_->forward(gk_logit_, Kd_, gk_low_, rank_, N);
    gk_ = a.template alloc<T>(size_t(N) * Kd_);
    {
      const T* logit = gk_logit_;
      T* gk = gk_;
      const size_t n = size_t(N) * Kd_;
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i++) gk[i] = forget_gate(logit[i]);
    }
    o_ = a.template alloc<T>(size_t(N) * Vd_);
    if (naive_) {
      gla_forward_naive(o_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale());
    } else {
      states_ = a.template alloc<T>(gla_states_size(B, Tn, H_, K_, V_, chunk_));
      gla_forward_chunked(o_, states_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale(), chunk_);
    }
    output_->forward(ctx, y, o_, x, N);
    ctx.record(name_, y, size_t(N) * C_);
  }

  void backward(StepContext<T>& ctx, T* dx, const T* dy, int B, int Tn) override {
    const int N = B * Tn, W = inputs_->width();
    Arena& a = ctx.arena;
    row_ops::fill_zero(dx, size_t(N) * C_);
    T* do_ = a.template alloc<T>(size_t(N) * Vd_);
    output_->backward(ctx, do_, dx, dy, N);
    T* dq = a.template alloc<T>(size_t(N) * Kd_);
    T* dk = a.template alloc<T>(size_t(N) * Kd_);
    T* dv = a.template alloc<T>(size_t(N) * Vd_);
    T* dg = a.template alloc<T>(size_t(N) * Kd_);
    if (naive_)
      gla_backward_naive(dq, dk, dv, dg, do_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale());
    else
      gla_backward_chunked(dq, dk, dv, dg, do_, states_, q_, k_, v_, gk_, B, Tn, H_, K_, V_, scale(), chunk_);
    // gate: gk = clamp(logsigmoid(l) / normalizer)
    T* dlogit = a.template alloc<T>(size_t(N) * Kd_);
    {
      const T* logit = gk_logit_;
      const size_t n = size_t(N) * Kd_;
      const T inv_norm = T(1.0 / normalizer_);
      if (clamp_min_ < 0) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
          const bool clamped = gate_unclamped(logit[i]) < clamp_min_;  // the forward's decision, bit for bit
          dlogit[i] = clamped ? T(0) : dg[i] * inv_norm * sigmoid(-logit[i]);
        }
      } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dlogit[i] = dg[i] * inv_norm * sigmoid(-logit[i]);  // d logsigmoid
      }
    }
    T* dlow = a.template alloc<T>(size_t(N) * rank_);
    gk_up_->backward(dlow, rank_, dlogit, Kd_, gk_low_, rank_, N);
    T* dtmp = a.template alloc<T>(size_t(N) * C_);
    gk_down_->backward(dtmp, C_, dlow, rank_, x_, C_, N);
    row_ops::add_into(dx, dtmp, size_t(N) * C_);
    // feature maps back onto the q|k|v buffer
    T* dqkv = a.template alloc<T>(size_t(N) * W);
    {
      const int Kd = Kd_, Vd = Vd_;
      const T* qkv = qkv_;
#pragma omp parallel for schedule(static)
      for (int n = 0; n < N; n++) {
        const T* row = qkv + size_t(n) * W;
        T* drow = dqkv + size_t(n) * W;
        const T* dqr = dq + size_t(n) * Kd;
        const T* dkr = dk + size_t(n) * Kd;
        switch (feature_map_) {
          case FeatureMap::none:
            std::copy(dqr, dqr + Kd, drow), std::copy(dkr, dkr + Kd, drow + Kd);
            break;
          default:
            for (int c = 0; c < Kd; c++) drow[c] = dqr[c] * feature_grad(row[c]);
            for (int c = 0; c < Kd; c++) drow[Kd + c] = dkr[c] * feature_grad(row[Kd + c]);
        }
        std::copy(dv + size_t(n) * Vd, dv + size_t(n + 1) * Vd, drow + 2 * Kd);
      }
    }
    inputs_->backward(ctx, dtmp, dqkv, B, Tn);
    row_ops::add_into(dx, dtmp, size_t(N) * C_);
  }

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
      for (int c = 0; c < Kd_; c++) q[c] = feature(qkv[c]), k[c] = feature(qkv[Kd_ + c]);
      gk_down_->forward(low.data(), rank_, xb, C_, 1);
      gk_up_->forward(logit.data(), Kd_, low.data(), rank_, 1);
      for (int c = 0; c < Kd_; c++) g[c] = forget_gate(logit[c]);
      gla_step(o.data() + size_t(b) * Vd_, s.S.data() + size_t(b) * H_ * K_ * V_, q.data(), k.data(),
               qkv.data() + 2 * Kd_, g.data(), H_, K_, V_, scale());
    }
    output_->apply(y, o.data(), x, B);
  }

 private:
  T scale() const { return T(1.0 / std::sqrt(double(K_))); }
  // logsigmoid(l) = min(l, 0) − log1p(e^−|l|). double (gradient checks): libm. float: vectorisable, with
  // log1p(e) = 2·atanh(s), s = e / (2 + e) ∈ (0, 1/3], by its odd series to s^15 (truncation < 2e−9 relative)
  // and vec_exp (which saturates at e^−87, where log1p(e) ≈ e is far below float resolution of the sum).
  static double log_sigmoid(double l) { return std::min(l, 0.0) - std::log1p(std::exp(-std::abs(l))); }
  static float log_sigmoid(float l) {
    const float a = l < 0.0f ? -l : l;
    const float e = vec_exp(-a);
    const float s = e / (2.0f + e), s2 = s * s;
    float p = 1.0f / 15;
    p = p * s2 + 1.0f / 13;
    p = p * s2 + 1.0f / 11;
    p = p * s2 + 1.0f / 9;
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    p = p * s2 + 1.0f;
    return (l < 0.0f ? l : 0.0f) - 2.0f * s * p;
  }
  // logsigmoid(l) / normalizer before the clamp (float: in float; double: in double)
  T gate_unclamped(T logit) const { return T(log_sigmoid(logit) / T(normalizer_)); }
  T forget_gate(T logit) const {
    const T g = gate_unclamped(logit);
    return clamp_min_ < 0 && g < clamp_min_ ? T(clamp_min_) : g;
  }
  static T elu_plus_one(T u) { return u > 0 ? u + T(1) : vec_exp(u); }
  T feature(T u) const {
    switch (feature_map_) {
      case FeatureMap::none: return u;
      case FeatureMap::elu_plus_one: return elu_plus_one(u);
      case FeatureMap::relu: return u > 0 ? u : T(0);
      case FeatureMap::silu: return u * sigmoid(u);
    }
    return u;
  }
  T feature_grad(T u) const {
    switch (feature_map_) {
      case FeatureMap::none: return T(1);
      case FeatureMap::elu_plus_one: return u > 0 ? T(1) : vec_exp(u);
      case FeatureMap::relu: return u > 0 ? T(1) : T(0);
      case FeatureMap::silu: {
        const T s = sigmoid(u);
        return s * (T(1) + u * (T(1) - s));
      }
    }
    return T(1);
  }

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
