#pragma once
// Gated DeltaNet (Yang et al. 2025) and DeltaNet (Schlag et al. 2021; Yang et al. 2024), docs/linear-families.md:
//   q, k, v = QkvInputs(x)               silu(short conv) with b, plain silu without; optional Canon-B
//   q, k = l2norm(q), l2norm(k)          per head, x / sqrt(Σx² + 1e-6)
//   β = sigmoid(b_proj(x)) (×2 with allow_neg_eigval)
//   g = −exp(A_log) · softplus(a_proj(x) + dt_bias)      Gated DeltaNet; DeltaNet has no decay
//   S ← exp(g_t) S;  u = β_t (v_t − Sᵀ k_t);  S ← S + k_t uᵀ;  o_t = K^{−1/2} Sᵀ q_t
//   y = GatedOutput(o, x)
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/model_shapes.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/delta_rule/inputs.h"
#include "engine/ops/delta_rule/naive.h"
#include "nn/gated_output.h"
#include "nn/mixer.h"
#include "nn/qkv_inputs.h"

namespace canonlab {

template <class T>
class DeltaNetMixer final : public SequenceMixer<T> {
 public:
  DeltaNetMixer(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg, bool gated)
      : name_(name), C_(cfg.d_model), H_(cfg.n_heads), chunk_(cfg.recurrent.chunk_size),
        naive_(cfg.recurrent.kernel == "naive"), gated_(gated), beta_scale_(cfg.delta.allow_neg_eigval ? 2.0 : 1.0) {
    const QkvShape s = qkv_shape(cfg, gated ? 'D' : 'N');
    Kd_ = s.key_width, Vd_ = s.value_width, K_ = s.head_k, V_ = s.head_v;
    inputs_ = std::make_unique<QkvInputs<T>>(store, name, cfg, Kd_, Vd_, true);
    b_proj_ = std::make_unique<Linear<T>>(store, name + ".b_proj", C_, H_, false, cfg.init_std);
    if (gated_) {
      a_proj_ = std::make_unique<Linear<T>>(store, name + ".a_proj", C_, H_, false, cfg.init_std);
      A_log_ = store.add(name + ".A_log", {H_}, InitSpec::log_uniform(0.0, 16.0), ParamGroup::ssm);
      dt_bias_ = store.add(name + ".dt_bias", {H_}, InitSpec::inverse_softplus_dt(1e-3, 0.1, 1e-4), ParamGroup::ssm);
    }
    output_ = std::make_unique<GatedOutput<T>>(store, name, cfg, Vd_, H_, cfg.delta.output_gate);
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
    q_rstd_ = a.template alloc<T>(size_t(N) * H_);
    k_rstd_ = a.template alloc<T>(size_t(N) * H_);
    beta_logit_ = a.template alloc<T>(size_t(N) * H_);
    b_proj_->forward(be, beta_logit_, H_, x, C_, N);
    beta_ = a.template alloc<T>(size_t(N) * H_);
    g_ = nullptr;
    a_logit_ = nullptr;
    if (gated_) {
      a_logit_ = a.template alloc<T>(size_t(N) * H_);
      a_proj_->forward(be, a_logit_, H_, x, C_, N);
      g_ = a.template alloc<T>(size_t(N) * H_);
    }
    // per token: l2norm(q), l2norm(k), v, β and the decay g
    be.delta_inputs_forward(q_, k_, v_, q_rstd_, k_rstd_, beta_, g_, qkv_, beta_logit_, a_logit_,
                            gated_ ? A_log_.value() : nullptr, gated_ ? dt_bias_.value() : nullptr, N, H_, K_, Vd_,
                            beta_scale_);
    o_ = a.template alloc<T>(size_t(N) * Vd_);
    if (naive_) {
      if (!be.counts_only())  // the resource estimate's backend: allocations only
        canonlab::delta_rule_forward_naive(o_, q_, k_, v_, beta_, g_, B, Tn, H_, K_, V_, scale());
    } else {
      states_ = a.template alloc<T>(be.delta_rule_states_size(B, Tn, H_, K_, V_, chunk_));
      be.delta_rule_forward_chunked(o_, states_, q_, k_, v_, beta_, g_, B, Tn, H_, K_, V_, scale(), chunk_);
    }
    output_->forward(ctx, y, o_, x, N);
    ctx.record(name_, y, size_t(N) * C_);
  }

  void needs(std::vector<OpNeed>& out) const override {
    out.push_back({OpGroup::delta_rule, name_ + " (model.family / model.layer_pattern)"});
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
    T* dbeta = a.template alloc<T>(size_t(N) * H_);
    T* dg = gated_ ? a.template alloc<T>(size_t(N) * H_) : nullptr;
    if (!naive_)
      be.delta_rule_backward_chunked(dq, dk, dv, dbeta, dg, do_, states_, q_, k_, v_, beta_, g_, B, Tn, H_, K_, V_,
                                     scale(), chunk_);
    else if (!be.counts_only())  // the resource estimate's backend: allocations only
      canonlab::delta_rule_backward_naive(dq, dk, dv, dbeta, dg, do_, q_, k_, v_, beta_, g_, B, Tn, H_, K_, V_,
                                          scale());
    T* dtmp = a.template alloc<T>(size_t(N) * C_);
    // β = c · sigmoid(l)
    T* dlogit = a.template alloc<T>(size_t(N) * H_);
    be.delta_beta_backward(dlogit, dbeta, beta_logit_, size_t(N) * H_, beta_scale_);
    b_proj_->backward(be, dtmp, C_, dlogit, H_, x_, C_, N);
    be.add_into(dx, dtmp, size_t(N) * C_);
    if (gated_) {
      T* du = dlogit;  // reuse: (N, H)
      be.delta_decay_backward(du, A_log_.grad(), dt_bias_.grad(), dg, a_logit_, g_, A_log_.value(), dt_bias_.value(),
                              N, H_);
      a_proj_->backward(be, dtmp, C_, du, H_, x_, C_, N);
      be.add_into(dx, dtmp, size_t(N) * C_);
    }
    T* dqkv = a.template alloc<T>(size_t(N) * W);
    be.delta_inputs_backward(dqkv, dq, dk, dv, q_, k_, q_rstd_, k_rstd_, N, H_, K_, Vd_);
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
    std::vector<T> qkv(W), q(Kd_), k(Kd_), rstd(H_), bl(H_), beta(H_), al(H_), g(H_), o(size_t(B) * Vd_);
    for (int b = 0; b < B; b++) {
      const T* xb = x + size_t(b) * C_;
      inputs_->step(qkv.data(), s.inputs[b], xb);
      delta_inputs_detail::l2norm_row(q.data(), rstd.data(), qkv.data(), H_, K_);
      delta_inputs_detail::l2norm_row(k.data(), rstd.data(), qkv.data() + Kd_, H_, K_);
      b_proj_->apply(bl.data(), H_, xb, C_, 1);
      for (int h = 0; h < H_; h++) beta[h] = T(beta_scale_) * sigmoid(bl[h]);  // as in forward
      if (gated_) {
        a_proj_->apply(al.data(), H_, xb, C_, 1);
        for (int h = 0; h < H_; h++) g[h] = delta_decay(al[h], A_log_.value()[h], dt_bias_.value()[h]);
      }
      delta_rule_step(o.data() + size_t(b) * Vd_, s.S.data() + size_t(b) * H_ * K_ * V_, q.data(), k.data(),
                      qkv.data() + 2 * Kd_, beta.data(), gated_ ? static_cast<const T*>(g.data()) : nullptr, H_, K_, V_,
                      scale());
    }
    output_->apply(y, o.data(), x, B);
  }

 private:
  T scale() const { return T(1.0 / std::sqrt(double(K_))); }

  std::string name_;
  int C_, H_, chunk_;
  bool naive_, gated_;
  double beta_scale_;
  int Kd_ = 0, Vd_ = 0, K_ = 0, V_ = 0;
  std::unique_ptr<QkvInputs<T>> inputs_;
  std::unique_ptr<Linear<T>> b_proj_, a_proj_;
  Param<T> A_log_, dt_bias_;
  std::unique_ptr<GatedOutput<T>> output_;
  const T* x_ = nullptr;
  const T* qkv_ = nullptr;
  T *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *q_rstd_ = nullptr, *k_rstd_ = nullptr;
  T *beta_logit_ = nullptr, *beta_ = nullptr, *a_logit_ = nullptr, *g_ = nullptr, *o_ = nullptr, *states_ = nullptr;
};

}  // namespace canonlab
