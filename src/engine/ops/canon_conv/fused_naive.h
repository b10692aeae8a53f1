#pragma once
// Reference for the fused Canon op (fused.h): literally the composition of the naive ops, stage by stage through
// full (B, Tn, C) temporaries. Same arguments and saved buffers as fused.h.
#include <cstddef>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/epilogue.h"
#include "engine/ops/canon_conv/naive.h"
#include "engine/ops/norm/naive.h"

namespace canonlab {

// out, in: (B, Tn, C); conv: (B, Tn, C) or null; mean, rstd: (B·Tn) or null, as canon_fused_forward
template <class T>
void canon_fused_forward_naive(T* out, T* conv, T* mean, T* rstd, const T* in, const T* weight, const T* norm_w,
                               const T* norm_b, int B, int Tn, int C, int K, int G, CanonEpilogue ep, T eps) {
  const int N = B * Tn;
  const size_t n = (size_t)N * C;
  std::vector<T> z(n), a(n), y(n), m(N), r(N);
  canon_conv_forward_naive(z.data(), in, weight, B, Tn, C, K, G);
  if (ep.activation == CanonActivation::silu) silu_forward(a.data(), z.data(), n);
  else if (ep.activation == CanonActivation::elu) elu_forward(a.data(), z.data(), n);
  else a = z;
  if (ep.norm == CanonNorm::rmsnorm) rmsnorm_forward_naive(y.data(), r.data(), a.data(), norm_w, N, C, eps);
  else if (ep.norm == CanonNorm::layernorm)
    layernorm_forward_naive(y.data(), m.data(), r.data(), a.data(), norm_w, norm_b, N, C, eps);
  else y = a;
  for (size_t i = 0; i < n; i++) out[i] = ep.residual ? in[i] + y[i] : y[i];
  if (conv)
    for (size_t i = 0; i < n; i++) conv[i] = z[i];
  for (int i = 0; i < N; i++) {
    if (mean) mean[i] = m[i];
    if (rstd) rstd[i] = r[i];
  }
}

// din: (B, Tn, C) written; dweight, dnorm_w, dnorm_b accumulated, as canon_fused_backward (no scratch)
template <class T>
void canon_fused_backward_naive(T* din, T* dweight, T* dnorm_w, T* dnorm_b, const T* dout, const T* in, const T* conv,
                                const T* weight, const T* norm_w, const T* mean, const T* rstd, int B, int Tn, int C,
                                int K, int G, CanonEpilogue ep) {
  const int N = B * Tn;
  const size_t n = (size_t)N * C;
  std::vector<T> a(n), dact(dout, dout + n), dz(n);
  if (ep.activation == CanonActivation::silu) silu_forward(a.data(), conv, n);
  else if (ep.activation == CanonActivation::elu) elu_forward(a.data(), conv, n);
  else if (conv) a.assign(conv, conv + n);
  if (ep.norm == CanonNorm::rmsnorm)
    rmsnorm_backward_naive(dact.data(), dnorm_w, dout, a.data(), norm_w, rstd, N, C);
  else if (ep.norm == CanonNorm::layernorm)
    layernorm_backward_naive(dact.data(), dnorm_w, dnorm_b, dout, a.data(), norm_w, mean, rstd, N, C);
  if (ep.activation == CanonActivation::silu) silu_backward(dz.data(), dact.data(), conv, n);
  else if (ep.activation == CanonActivation::elu) elu_backward(dz.data(), dact.data(), conv, n);
  else dz = dact;
  canon_conv_backward_naive(din, dweight, dz.data(), in, weight, B, Tn, C, K, G);
  if (ep.residual)
    for (size_t i = 0; i < n; i++) din[i] += dout[i];
}

}  // namespace canonlab
