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
#include "engine/ops/delta_rule/chunked.h"
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
    const int N = B * Tn, W = inputs_->width();
    Arena& a = ctx.arena;
    x_ = x;
    qkv_ = inputs_->forward(ctx, x, B, Tn);
    q_ = a.template alloc<T>(size_t(N) * Kd_);
    k_ = a.template alloc<T>(size_t(N) * Kd_);
    v_ = a.template alloc<T>(size_t(N) * Vd_);
    q_rstd_ = a.template alloc<T>(size_t(N) * H_);
    k_rstd_ = a.template alloc<T>(size_t(N) * H_);
    beta_logit_ = a.template alloc<T>(size_t(N) * H_);
    b_proj_->forward(beta_logit_, H_, x, C_, N);
    beta_ = a.template alloc<T>(size_t(N) * H_);
    g_ = nullptr;
    if (gated_) {
      a_logit_ = a.template alloc<T>(size_t(N) * H_);
      a_proj_->forward(a_logit_, H_, x, C_, N);
      g_ = a.template alloc<T>(size_t(N) * H_);
    }
    // per token: l2norm(q), l2norm(k), v, β and the decay g
    {
      const int Kd = Kd_, Vd = Vd_, H = H_;
      const T* qkv = qkv_;
      const T* beta_logit = beta_logit_;
      const T* a_logit = a_logit_;
      T *q = q_, *k = k_, *v = v_, *q_rstd = q_rstd_, *k_rstd = k_rstd_, *beta = beta_, *g = g_;
      const T bs = T(beta_scale_);
#pragma omp parallel for schedule(static)
      for (int n = 0; n < N; n++) {
        const T* row = qkv + size_t(n) * W;
        l2norm_row(q + size_t(n) * Kd, q_rstd + size_t(n) * H, row);
        l2norm_row(k + size_t(n) * Kd, k_rstd + size_t(n) * H, row + Kd);
        std::copy(row + 2 * Kd, row + W, v + size_t(n) * Vd);
        for (int h = 0; h < H; h++) beta[size_t(n) * H + h] = bs * sigmoid(beta_logit[size_t(n) * H + h]);
        if (g)
          for (int h = 0; h < H; h++) g[size_t(n) * H + h] = decay(a_logit[size_t(n) * H + h], h);
      }
    }
    o_ = a.template alloc<T>(size_t(N) * Vd_);
    if (naive_) {
      delta_rule_forward_naive(o_, q_, k_, v_, beta_, static_cast<const T*>(g_), B, Tn, H_, K_, V_, scale());
    } else {
      states_ = a.template alloc<T>(delta_rule_states_size(B, Tn, H_, K_, V_, chunk_));
      delta_rule_forward_chunked(o_, states_, q_, k_, v_, beta_, static_cast<const T*>(g_), B, Tn, H_, K_, V_, scale(),
                                 chunk_);
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
    T* dbeta = a.template alloc<T>(size_t(N) * H_);
    T* dg = gated_ ? a.template alloc<T>(size_t(N) * H_) : nullptr;
    if (naive_)
      delta_rule_backward_naive(dq, dk, dv, dbeta, dg, do_, q_, k_, v_, beta_, static_cast<const T*>(g_), B, Tn, H_,
                                K_, V_, scale());
    else
      delta_rule_backward_chunked(dq, dk, dv, dbeta, dg, do_, states_, q_, k_, v_, beta_, static_cast<const T*>(g_), B,
                                  Tn, H_, K_, V_, scale(), chunk_);
    T* dtmp = a.template alloc<T>(size_t(N) * C_);
    // β = c · sigmoid(l)
    T* dlogit = a.template alloc<T>(size_t(N) * H_);
    {
      const T* beta_logit = beta_logit_;
      const T bs = T(beta_scale_);
      const size_t n = size_t(N) * H_;
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i++) {
        const T s = sigmoid(beta_logit[i]);
        dlogit[i] = dbeta[i] * bs * s * (T(1) - s);
      }
    }
    b_proj_->backward(dtmp, C_, dlogit, H_, x_, C_, N);
    row_ops::add_into(dx, dtmp, size_t(N) * C_);
    if (gated_) {
      // g = −exp(A_log) · softplus(u), u = a + dt_bias:  ∂g/∂A_log = g,  ∂g/∂u = −exp(A_log) · sigmoid(u)
      // deterministic row-block sums: acc[h] = dA_log, acc[H + h] = ddt_bias
      T* du = dlogit;  // reuse: (N, H)
      const int H = H_;
      std::vector<double> sums(size_t(2) * H, 0.0), negA(H);
      for (int h = 0; h < H; h++) negA[h] = -std::exp(double(A_log_.value()[h]));
      const T *a_logit = a_logit_, *g = g_, *dt_bias = dt_bias_.value();
      row_ops::row_block_sums(sums.data(), 2 * H, N, [&](int n, double* acc) {
        for (int h = 0; h < H; h++) {
          const size_t i = size_t(n) * H + h;
          const double u = double(a_logit[i]) + double(dt_bias[h]);
          const double d = double(dg[i]) * negA[h] / (1.0 + std::exp(-u));
          acc[h] += double(dg[i]) * double(g[i]);
          acc[H + h] += d;
          du[i] = T(d);
        }
      });
      for (int h = 0; h < H; h++) A_log_.grad()[h] += T(sums[h]), dt_bias_.grad()[h] += T(sums[H + h]);
      a_proj_->backward(dtmp, C_, du, H_, x_, C_, N);
      row_ops::add_into(dx, dtmp, size_t(N) * C_);
    }
    T* dqkv = a.template alloc<T>(size_t(N) * W);
    {
      const int Kd = Kd_, Vd = Vd_, H = H_;
      const T *q = q_, *k = k_, *q_rstd = q_rstd_, *k_rstd = k_rstd_;
#pragma omp parallel for schedule(static)
      for (int n = 0; n < N; n++) {
        T* drow = dqkv + size_t(n) * W;
        l2norm_row_backward(drow, dq + size_t(n) * Kd, q + size_t(n) * Kd, q_rstd + size_t(n) * H);
        l2norm_row_backward(drow + Kd, dk + size_t(n) * Kd, k + size_t(n) * Kd, k_rstd + size_t(n) * H);
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
    std::vector<T> qkv(W), q(Kd_), k(Kd_), rstd(H_), bl(H_), beta(H_), al(H_), g(H_), o(size_t(B) * Vd_);
    for (int b = 0; b < B; b++) {
      const T* xb = x + size_t(b) * C_;
      inputs_->step(qkv.data(), s.inputs[b], xb);
      l2norm_row(q.data(), rstd.data(), qkv.data());
      l2norm_row(k.data(), rstd.data(), qkv.data() + Kd_);
      b_proj_->forward(bl.data(), H_, xb, C_, 1);
      for (int h = 0; h < H_; h++) beta[h] = T(beta_scale_) * sigmoid(bl[h]);  // as in forward
      if (gated_) {
        a_proj_->forward(al.data(), H_, xb, C_, 1);
        for (int h = 0; h < H_; h++) g[h] = decay(al[h], h);
      }
      delta_rule_step(o.data() + size_t(b) * Vd_, s.S.data() + size_t(b) * H_ * K_ * V_, q.data(), k.data(),
                      qkv.data() + 2 * Kd_, beta.data(), gated_ ? static_cast<const T*>(g.data()) : nullptr, H_, K_, V_,
                      scale());
    }
    output_->apply(y, o.data(), x, B);
  }

 private:
  T scale() const { return T(1.0 / std::sqrt(double(K_))); }
  T decay(T a_logit, int h) const {
    const double u = double(a_logit) + double(dt_bias_.value()[h]);
    return T(-std::exp(double(A_log_.value()[h])) * softplus(u));
  }
  // One token's H heads of K: y = x / sqrt(Σx² + 1e-6) per head.
  // The sums in double lanes, the elementwise products in T.
  void l2norm_row(T* y, T* rstd, const T* x) const {
    const int K = K_;
    for (int h = 0; h < H_; h++) {
      const T* xh = x + h * K;
      T* yh = y + h * K;
      const double ss = row_ops::dot_d(xh, xh, K);
      const T r = T(1.0 / std::sqrt(ss + 1e-6));
      rstd[h] = r;
      for (int c = 0; c < K; c++) yh[c] = xh[c] * r;
    }
  }
  // dx = r · (dy − y · Σ dy ⊙ y)
  void l2norm_row_backward(T* dx, const T* dy, const T* y, const T* rstd) const {
    const int K = K_;
    for (int h = 0; h < H_; h++) {
      const T* dyh = dy + h * K;
      const T* yh = y + h * K;
      T* dxh = dx + h * K;
      const T dot = T(row_ops::dot_d(dyh, yh, K)), r = rstd[h];
      for (int c = 0; c < K; c++) dxh[c] = r * (dyh[c] - yh[c] * dot);
    }
  }

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
