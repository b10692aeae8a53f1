#pragma once
// gates.h (GLA's feature map and forget gate) as element kernels (engine/ops/element_kernels.h), for the GPU
// (gla/cuda.cu) and checked on the host against gates.h (tests/unit/test_ops_linear_glue_elements.cpp). Every
// element is independent. The log-sigmoid is taken in double (the CPU's float path uses a series in float).
#include <cstddef>

#include "engine/ops/element_kernels.h"
#include "engine/ops/gla/feature_map.h"

namespace canonlab {

namespace gla_gate_elements {

// logsigmoid(l) = min(l, 0) − log1p(e^−|l|)
CANONLAB_HD inline double log_sigmoid(double l) { return (l < 0 ? l : 0.0) - hd_log1p(hd_exp(l < 0 ? l : -l)); }

template <class T>
CANONLAB_HD T gate_unclamped(T logit, double normalizer) {
  return T(log_sigmoid(double(logit)) / normalizer);
}

template <class T>
CANONLAB_HD T feature(T u, FeatureMap fm) {
  switch (fm) {
    case FeatureMap::none: return u;
    case FeatureMap::elu_plus_one: return u > T(0) ? u + T(1) : hd_exp(u);
    case FeatureMap::relu: return u > T(0) ? u : T(0);
    case FeatureMap::silu: return u * hd_sigmoid(u);
  }
  return u;
}

template <class T>
CANONLAB_HD T feature_grad(T u, FeatureMap fm) {
  switch (fm) {
    case FeatureMap::none: return T(1);
    case FeatureMap::elu_plus_one: return u > T(0) ? T(1) : hd_exp(u);
    case FeatureMap::relu: return u > T(0) ? T(1) : T(0);
    case FeatureMap::silu: return hd_silu_grad(u);
  }
  return T(1);
}

// q, k = φ(q), φ(k); v copied.   One element per (n, column of [q | k | v]).
template <class T>
struct Features {
  T *q, *k, *v;
  const T* qkv;
  int Kd, Vd;
  FeatureMap fm;
  CANONLAB_HD void operator()(size_t i) const {
    const int W = 2 * Kd + Vd, j = int(i % W);
    const size_t n = i / W;
    const T x = qkv[i];
    if (j < Kd)
      q[n * Kd + j] = feature(x, fm);
    else if (j < 2 * Kd)
      k[n * Kd + (j - Kd)] = feature(x, fm);
    else
      v[n * Vd + (j - 2 * Kd)] = x;
  }
};

template <class T>
struct FeaturesGrad {
  T* dqkv;
  const T *dq, *dk, *dv, *qkv;
  int Kd, Vd;
  FeatureMap fm;
  CANONLAB_HD void operator()(size_t i) const {
    const int W = 2 * Kd + Vd, j = int(i % W);
    const size_t n = i / W;
    if (j < Kd)
      dqkv[i] = fm == FeatureMap::none ? dq[n * Kd + j] : dq[n * Kd + j] * feature_grad(qkv[i], fm);
    else if (j < 2 * Kd)
      dqkv[i] = fm == FeatureMap::none ? dk[n * Kd + (j - Kd)] : dk[n * Kd + (j - Kd)] * feature_grad(qkv[i], fm);
    else
      dqkv[i] = dv[n * Vd + (j - 2 * Kd)];
  }
};

template <class T>
struct Gate {
  T* gk;
  const T* logit;
  double normalizer, clamp_min;
  CANONLAB_HD void operator()(size_t i) const {
    const T g = gate_unclamped(logit[i], normalizer);
    gk[i] = clamp_min < 0 && g < clamp_min ? T(clamp_min) : g;
  }
};

template <class T>
struct GateGrad {
  T* dlogit;
  const T *dg, *logit;
  double normalizer, clamp_min;
  CANONLAB_HD void operator()(size_t i) const {
    const bool clamped = clamp_min < 0 && gate_unclamped(logit[i], normalizer) < clamp_min;  // the forward's decision
    dlogit[i] = clamped ? T(0) : dg[i] * T(1.0 / normalizer) * hd_sigmoid(-logit[i]);
  }
};

}  // namespace gla_gate_elements

template <class T, class Launch>
void gla_feature_forward_elements(const Launch& launch, T* q, T* k, T* v, const T* qkv, int N, int Kd, int Vd,
                                  FeatureMap fm) {
  launch((size_t)N * (2 * Kd + Vd), gla_gate_elements::Features<T>{q, k, v, qkv, Kd, Vd, fm});
}

template <class T, class Launch>
void gla_feature_backward_elements(const Launch& launch, T* dqkv, const T* dq, const T* dk, const T* dv, const T* qkv,
                                   int N, int Kd, int Vd, FeatureMap fm) {
  launch((size_t)N * (2 * Kd + Vd), gla_gate_elements::FeaturesGrad<T>{dqkv, dq, dk, dv, qkv, Kd, Vd, fm});
}

template <class T, class Launch>
void gla_gate_forward_elements(const Launch& launch, T* gk, const T* logit, size_t n, double normalizer,
                               double clamp_min) {
  launch(n, gla_gate_elements::Gate<T>{gk, logit, normalizer, clamp_min});
}

template <class T, class Launch>
void gla_gate_backward_elements(const Launch& launch, T* dlogit, const T* dg, const T* logit, size_t n,
                                double normalizer, double clamp_min) {
  launch(n, gla_gate_elements::GateGrad<T>{dlogit, dg, logit, normalizer, clamp_min});
}

}  // namespace canonlab
