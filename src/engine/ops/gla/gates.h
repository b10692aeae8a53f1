#pragma once
// GLA's glue around the chunked scan (nn/gla.h, docs/linear-families.md): the feature map φ on q and k, and
// the per-key-channel forget gate gk = max(logsigmoid(l) / normalizer, clamp_min) in log space, forward and
// backward. One file: the loops are the reference; every element is independent.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/ops/activation/activation.h"
#include "engine/ops/gla/feature_map.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace gla_gate_detail {
// logsigmoid(l) = min(l, 0) − log1p(e^−|l|). double (gradient checks): libm. float: vectorisable, with
// log1p(e) = 2·atanh(s), s = e / (2 + e) ∈ (0, 1/3], by its odd series to s^15 (truncation < 2e−9 relative)
// and vec_exp (which saturates at e^−87, where log1p(e) ≈ e is far below float resolution of the sum).
inline double log_sigmoid(double l) { return std::min(l, 0.0) - std::log1p(std::exp(-std::abs(l))); }
inline float log_sigmoid(float l) {
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
template <class T>
T elu_plus_one(T u) {
  return u > 0 ? u + T(1) : vec_exp(u);
}
}  // namespace gla_gate_detail

// logsigmoid(l) / normalizer before the clamp (float: in float; double: in double)
template <class T>
T gla_gate_unclamped(T logit, double normalizer) {
  return T(gla_gate_detail::log_sigmoid(logit) / T(normalizer));
}
// The forget gate of one channel; clamp_min < 0 clamps from below, 0 means no clamp.
template <class T>
T gla_forget_gate(T logit, double normalizer, double clamp_min) {
  const T g = gla_gate_unclamped(logit, normalizer);
  return clamp_min < 0 && g < clamp_min ? T(clamp_min) : g;
}
template <class T>
T gla_feature(T u, FeatureMap fm) {
  switch (fm) {
    case FeatureMap::none: return u;
    case FeatureMap::elu_plus_one: return gla_gate_detail::elu_plus_one(u);
    case FeatureMap::relu: return u > 0 ? u : T(0);
    case FeatureMap::silu: return u * sigmoid(u);
  }
  return u;
}
template <class T>
T gla_feature_grad(T u, FeatureMap fm) {
  switch (fm) {
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

// qkv: (N, W) = [q (Kd) | k (Kd) | v (Vd)] -> q, k: (N, Kd) = φ(q), φ(k); v: (N, Vd) copied out
template <class T>
void gla_feature_forward(T* q, T* k, T* v, const T* qkv, int N, int Kd, int Vd, FeatureMap fm) {
  using gla_gate_detail::elu_plus_one;
  const int W = 2 * Kd + Vd;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* row = qkv + size_t(n) * W;
    T* qr = q + size_t(n) * Kd;
    T* kr = k + size_t(n) * Kd;
    switch (fm) {  // hoisted so that each case's loop vectorises
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
        for (int c = 0; c < Kd; c++) qr[c] = row[c] * sigmoid(row[c]), kr[c] = row[Kd + c] * sigmoid(row[Kd + c]);
        break;
    }
    std::copy(row + 2 * Kd, row + W, v + size_t(n) * Vd);
  }
}

// dqkv: (N, W) written = [dq ⊙ φ'(q) | dk ⊙ φ'(k) | dv]; qkv: the forward's input
template <class T>
void gla_feature_backward(T* dqkv, const T* dq, const T* dk, const T* dv, const T* qkv, int N, int Kd, int Vd,
                          FeatureMap fm) {
  const int W = 2 * Kd + Vd;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* row = qkv + size_t(n) * W;
    T* drow = dqkv + size_t(n) * W;
    const T* dqr = dq + size_t(n) * Kd;
    const T* dkr = dk + size_t(n) * Kd;
    switch (fm) {
      case FeatureMap::none:
        std::copy(dqr, dqr + Kd, drow), std::copy(dkr, dkr + Kd, drow + Kd);
        break;
      default:
        for (int c = 0; c < Kd; c++) drow[c] = dqr[c] * gla_feature_grad(row[c], fm);
        for (int c = 0; c < Kd; c++) drow[Kd + c] = dkr[c] * gla_feature_grad(row[Kd + c], fm);
    }
    std::copy(dv + size_t(n) * Vd, dv + size_t(n + 1) * Vd, drow + 2 * Kd);
  }
}

// gk = gla_forget_gate(logit) elementwise (n)
template <class T>
void gla_gate_forward(T* gk, const T* logit, size_t n, double normalizer, double clamp_min) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) gk[i] = gla_forget_gate(logit[i], normalizer, clamp_min);
}

// dlogit = dg · d gk / d logit: logsigmoid' = sigmoid(−l), over the normalizer; 0 where the forward clamped
template <class T>
void gla_gate_backward(T* dlogit, const T* dg, const T* logit, size_t n, double normalizer, double clamp_min) {
  const T inv_norm = T(1.0 / normalizer);
  if (clamp_min < 0) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
      const bool clamped = gla_gate_unclamped(logit[i], normalizer) < clamp_min;  // the forward's decision, bit for bit
      dlogit[i] = clamped ? T(0) : dg[i] * inv_norm * sigmoid(-logit[i]);
    }
  } else {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dlogit[i] = dg[i] * inv_norm * sigmoid(-logit[i]);
  }
}

}  // namespace canonlab
