#pragma once
// inputs.h ((Gated) DeltaNet's glue around the delta rule) as element kernels (engine/ops/element_kernels.h), for the
// GPU (delta_rule/cuda.cu) and checked on the host against inputs.h (tests/unit/test_ops_linear_glue_elements.cpp).
// One element per (token, head) for the per-head L2 norms, per (token, column) for the copies; dA_log and ddt_bias
// through the fixed row blocks of column_sums.
#include <cstddef>

#include "engine/ops/element_kernels.h"

namespace canonlab {

namespace delta_input_elements {

// q, k of head h l2-normalised (rstd saved), β = beta_scale σ(b), g = −exp(A_log) softplus(a + dt_bias).
// One element per (n, h).
template <class T>
struct Heads {
  T *q, *k, *q_rstd, *k_rstd, *beta, *g;
  const T *qkv, *beta_logit, *a_logit, *A_log, *dt_bias;
  int H, K, Vd;
  T beta_scale;
  CANONLAB_HD void l2norm(T* y, T* rstd, const T* x) const {
    double ss = 0;
    for (int c = 0; c < K; c++) ss += double(x[c]) * double(x[c]);
    const T r = T(1.0 / hd_sqrt(ss + 1e-6));
    *rstd = r;
    for (int c = 0; c < K; c++) y[c] = x[c] * r;
  }
  CANONLAB_HD void operator()(size_t i) const {
    const int h = int(i % H), Kd = H * K;
    const size_t n = i / H;
    const T* row = qkv + n * (2 * Kd + Vd);
    l2norm(q + n * Kd + (size_t)h * K, q_rstd + i, row + (size_t)h * K);
    l2norm(k + n * Kd + (size_t)h * K, k_rstd + i, row + Kd + (size_t)h * K);
    beta[i] = beta_scale * hd_sigmoid(beta_logit[i]);
    if (a_logit) g[i] = T(-hd_exp(double(A_log[h])) * hd_softplus(double(a_logit[i]) + double(dt_bias[h])));
  }
};

// v = the value columns of the row.   One element per (n, c).
template <class T>
struct Values {
  T* v;
  const T* qkv;
  int Kd, Vd;
  CANONLAB_HD void operator()(size_t i) const { v[i] = qkv[i / Vd * (2 * Kd + Vd) + 2 * Kd + i % Vd]; }
};

template <class T>
struct BetaGrad {
  T* dlogit;
  const T *dbeta, *beta_logit;
  T beta_scale;
  CANONLAB_HD void operator()(size_t i) const {
    const T s = hd_sigmoid(beta_logit[i]);
    dlogit[i] = dbeta[i] * beta_scale * s * (T(1) - s);
  }
};

// g = −exp(A_log) softplus(u), u = a + dt_bias: du = dg · (−exp(A_log)) σ(u) written per (n, h); dA_log, ddt_bias
// summed by DecayTerm.
template <class T>
struct DecayGrad {
  T* du;
  const T *dg, *a_logit, *g, *A_log, *dt_bias;
  int H;
  CANONLAB_HD double logit_grad(int n, int h) const {
    const size_t i = (size_t)n * H + h;
    const double u = double(a_logit[i]) + double(dt_bias[h]);
    return double(dg[i]) * -hd_exp(double(A_log[h])) / (1.0 + hd_exp(-u));
  }
  CANONLAB_HD void operator()(size_t i) const { du[i] = T(logit_grad(int(i / H), int(i % H))); }
};

template <class T>
struct DecayLogTerm {  // ∂g/∂A_log = g
  DecayGrad<T> d;
  CANONLAB_HD double operator()(int n, int h) const {
    const size_t i = (size_t)n * d.H + h;
    return double(d.dg[i]) * double(d.g[i]);
  }
};

template <class T>
struct DecayBiasTerm {
  DecayGrad<T> d;
  CANONLAB_HD double operator()(int n, int h) const { return d.logit_grad(n, h); }
};

// dx = r (dy − y Σ dy ⊙ y) for q and k of head h.   One element per (n, h).
template <class T>
struct HeadsGrad {
  T* dqkv;
  const T *dq, *dk, *q, *k, *q_rstd, *k_rstd;
  int H, K, Vd;
  CANONLAB_HD void l2norm_grad(T* dx, const T* dy, const T* y, T r) const {
    double dot = 0;
    for (int c = 0; c < K; c++) dot += double(dy[c]) * double(y[c]);
    const T d = T(dot);
    for (int c = 0; c < K; c++) dx[c] = r * (dy[c] - y[c] * d);
  }
  CANONLAB_HD void operator()(size_t i) const {
    const int h = int(i % H), Kd = H * K;
    const size_t n = i / H, at = n * Kd + (size_t)h * K;
    T* drow = dqkv + n * (2 * Kd + Vd);
    l2norm_grad(drow + (size_t)h * K, dq + at, q + at, q_rstd[i]);
    l2norm_grad(drow + Kd + (size_t)h * K, dk + at, k + at, k_rstd[i]);
  }
};

template <class T>
struct ValuesGrad {
  T* dqkv;
  const T* dv;
  int Kd, Vd;
  CANONLAB_HD void operator()(size_t i) const { dqkv[i / Vd * (2 * Kd + Vd) + 2 * Kd + i % Vd] = dv[i]; }
};

}  // namespace delta_input_elements

template <class T, class Launch>
void delta_inputs_forward_elements(const Launch& launch, T* q, T* k, T* v, T* q_rstd, T* k_rstd, T* beta, T* g,
                                   const T* qkv, const T* beta_logit, const T* a_logit, const T* A_log,
                                   const T* dt_bias, int N, int H, int K, int Vd, double beta_scale) {
  using namespace delta_input_elements;
  launch((size_t)N * H, Heads<T>{q, k, q_rstd, k_rstd, beta, g, qkv, beta_logit, a_logit, A_log, dt_bias, H, K, Vd,
                                 T(beta_scale)});
  launch((size_t)N * Vd, Values<T>{v, qkv, H * K, Vd});
}

template <class T, class Launch>
void delta_beta_backward_elements(const Launch& launch, T* dlogit, const T* dbeta, const T* beta_logit, size_t n,
                                  double beta_scale) {
  launch(n, delta_input_elements::BetaGrad<T>{dlogit, dbeta, beta_logit, T(beta_scale)});
}

// delta_decay_backward's contract; partial: kRowBlocks · H doubles of scratch.
template <class T, class Launch>
void delta_decay_backward_elements(const Launch& launch, T* du, T* dA_log, T* ddt_bias, const T* dg, const T* a_logit,
                                   const T* g, const T* A_log, const T* dt_bias, int N, int H, double* partial) {
  using namespace delta_input_elements;
  const DecayGrad<T> d{du, dg, a_logit, g, A_log, dt_bias, H};
  launch((size_t)N * H, d);
  column_sums(launch, dA_log, partial, N, H, DecayLogTerm<T>{d});
  column_sums(launch, ddt_bias, partial, N, H, DecayBiasTerm<T>{d});
}

template <class T, class Launch>
void delta_inputs_backward_elements(const Launch& launch, T* dqkv, const T* dq, const T* dk, const T* dv, const T* q,
                                    const T* k, const T* q_rstd, const T* k_rstd, int N, int H, int K, int Vd) {
  using namespace delta_input_elements;
  launch((size_t)N * H, HeadsGrad<T>{dqkv, dq, dk, q, k, q_rstd, k_rstd, H, K, Vd});
  launch((size_t)N * Vd, ValuesGrad<T>{dqkv, dv, H * K, Vd});
}

}  // namespace canonlab
