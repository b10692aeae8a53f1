#pragma once
// The glue of (Gated) DeltaNet around the chunked delta rule (nn/delta_net.h, docs/linear-families.md): per token
// l2norm(q), l2norm(k) per head, β = c · sigmoid(b logit), the decay g = −exp(A_log) · softplus(a logit + dt_bias),
// and their backward. One file: the loops are the reference. Rows are independent; the per-head parameter sums go
// through row_ops::row_block_sums (fixed blocks, summed in block order).
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/row_ops.h"

namespace canonlab {

namespace delta_inputs_detail {
// One token's H heads of K: y = x / sqrt(Σx² + 1e-6) per head. The sums in double lanes, the products in T.
template <class T>
void l2norm_row(T* y, T* rstd, const T* x, int H, int K) {
  for (int h = 0; h < H; h++) {
    const T* xh = x + h * K;
    T* yh = y + h * K;
    const double ss = row_ops::dot_d(xh, xh, K);
    const T r = T(1.0 / std::sqrt(ss + 1e-6));
    rstd[h] = r;
    for (int c = 0; c < K; c++) yh[c] = xh[c] * r;
  }
}
// dx = r · (dy − y · Σ dy ⊙ y)
template <class T>
void l2norm_row_backward(T* dx, const T* dy, const T* y, const T* rstd, int H, int K) {
  for (int h = 0; h < H; h++) {
    const T* dyh = dy + h * K;
    const T* yh = y + h * K;
    T* dxh = dx + h * K;
    const T dot = T(row_ops::dot_d(dyh, yh, K)), r = rstd[h];
    for (int c = 0; c < K; c++) dxh[c] = r * (dyh[c] - yh[c] * dot);
  }
}
}  // namespace delta_inputs_detail

// The decay of head h: −exp(A_log[h]) · softplus(a_logit + dt_bias[h])
template <class T>
T delta_decay(T a_logit, T A_log, T dt_bias) {
  const double u = double(a_logit) + double(dt_bias);
  return T(-std::exp(double(A_log)) * softplus(u));
}

// qkv: (N, W = 2 H K + Vd) = [q | k | v]; beta_logit: (N, H); a_logit: (N, H) or null (DeltaNet: no decay).
// Writes q, k: (N, H K) l2-normalised per head with q_rstd, k_rstd: (N, H); v: (N, Vd); beta: (N, H) =
// beta_scale · sigmoid(beta_logit); g: (N, H) = delta_decay(a_logit, A_log, dt_bias) when a_logit is non-null.
template <class T>
void delta_inputs_forward(T* q, T* k, T* v, T* q_rstd, T* k_rstd, T* beta, T* g, const T* qkv, const T* beta_logit,
                          const T* a_logit, const T* A_log, const T* dt_bias, int N, int H, int K, int Vd,
                          double beta_scale) {
  const int Kd = H * K, W = 2 * Kd + Vd;
  const T bs = T(beta_scale);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* row = qkv + size_t(n) * W;
    delta_inputs_detail::l2norm_row(q + size_t(n) * Kd, q_rstd + size_t(n) * H, row, H, K);
    delta_inputs_detail::l2norm_row(k + size_t(n) * Kd, k_rstd + size_t(n) * H, row + Kd, H, K);
    std::copy(row + 2 * Kd, row + W, v + size_t(n) * Vd);
    for (int h = 0; h < H; h++) beta[size_t(n) * H + h] = bs * sigmoid(beta_logit[size_t(n) * H + h]);
    if (a_logit)
      for (int h = 0; h < H; h++) g[size_t(n) * H + h] = delta_decay(a_logit[size_t(n) * H + h], A_log[h], dt_bias[h]);
  }
}

// dlogit = dbeta · beta_scale · σ(l)(1 − σ(l)) (n)
template <class T>
void delta_beta_backward(T* dlogit, const T* dbeta, const T* beta_logit, size_t n, double beta_scale) {
  const T bs = T(beta_scale);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const T s = sigmoid(beta_logit[i]);
    dlogit[i] = dbeta[i] * bs * s * (T(1) - s);
  }
}

// g = −exp(A_log) · softplus(u), u = a + dt_bias:  ∂g/∂A_log = g,  ∂g/∂u = −exp(A_log) · sigmoid(u).
// du: (N, H) written; dA_log, ddt_bias: (H) accumulated; dg, a_logit, g: (N, H).
template <class T>
void delta_decay_backward(T* du, T* dA_log, T* ddt_bias, const T* dg, const T* a_logit, const T* g, const T* A_log,
                          const T* dt_bias, int N, int H) {
  std::vector<double> sums(size_t(2) * H, 0.0), negA(H);  // acc[h] = dA_log, acc[H + h] = ddt_bias
  for (int h = 0; h < H; h++) negA[h] = -std::exp(double(A_log[h]));
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
  for (int h = 0; h < H; h++) dA_log[h] += T(sums[h]), ddt_bias[h] += T(sums[H + h]);
}

// dqkv: (N, W) written = [l2norm'(dq) | l2norm'(dk) | dv]; q, k, q_rstd, k_rstd: the forward's outputs
template <class T>
void delta_inputs_backward(T* dqkv, const T* dq, const T* dk, const T* dv, const T* q, const T* k, const T* q_rstd,
                           const T* k_rstd, int N, int H, int K, int Vd) {
  const int Kd = H * K, W = 2 * Kd + Vd;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T* drow = dqkv + size_t(n) * W;
    delta_inputs_detail::l2norm_row_backward(drow, dq + size_t(n) * Kd, q + size_t(n) * Kd, q_rstd + size_t(n) * H, H, K);
    delta_inputs_detail::l2norm_row_backward(drow + Kd, dk + size_t(n) * Kd, k + size_t(n) * Kd, k_rstd + size_t(n) * H,
                                             H, K);
    std::copy(dv + size_t(n) * Vd, dv + size_t(n + 1) * Vd, drow + 2 * Kd);
  }
}

}  // namespace canonlab
