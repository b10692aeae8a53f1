#pragma once
// Reference GLA (gated linear attention with one forget gate per key channel): the plain per-token recurrence,
// one thread, double state and accumulators. Per (batch, head), with S a K x V matrix and S_0 = 0:
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ
//   o_t = scale · S_tᵀ q_t
// g holds log forget gates (<= 0). gla_step is one token of this recurrence (decoding); the naive forward is
// that step in a loop over time. The backward is fla's recurrent backward (fused_recurrent_bwd_kernel):
// dq from a forward replay, then dk, dv and dg from a reverse sweep carrying dS (the gradient of the state).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/error.h"

namespace canonlab {

// Elements of the `states` buffer: the state at every chunk start, (B, H, nchunks, K, V)
// (gla_forward_chunked and the GPU kernels save them for backward).
inline size_t gla_states_size(int Bn, int Tn, int H, int K, int V, int chunk) {
  CANONLAB_CHECK(chunk >= 1, "gla: chunk size must be at least 1");
  const size_t nchunks = Tn > 0 ? ((size_t)Tn + chunk - 1) / chunk : 0;
  return (size_t)Bn * H * nchunks * K * V;
}

namespace gla_naive_detail {
// One token for all heads, with the state held in S (double for the naive forward, T for gla_step).
// o_t: (H, V) written; state: (H, K, V) updated in place; q_t, k_t, g_t: (H, K); v_t: (H, V)
template <class S, class T>
void step(T* o_t, S* state, const T* q_t, const T* k_t, const T* v_t, const T* g_t, int H, int K, int V, T scale) {
  for (int h = 0; h < H; h++) {
    S* st = state + (size_t)h * K * V;  // (K, V)
    const T *q = q_t + (size_t)h * K, *k = k_t + (size_t)h * K, *g = g_t + (size_t)h * K;
    const T* v = v_t + (size_t)h * V;
    for (int a = 0; a < K; a++) {
      const double decay = std::exp(double(g[a]));
      for (int b = 0; b < V; b++) st[a * V + b] = S(decay * double(st[a * V + b]) + double(k[a]) * double(v[b]));
    }
    for (int b = 0; b < V; b++) {
      double acc = 0;
      for (int a = 0; a < K; a++) acc += double(q[a]) * double(st[a * V + b]);
      o_t[(size_t)h * V + b] = T(double(scale) * acc);
    }
  }
}
}  // namespace gla_naive_detail

// One decoding step of one batch element.
// o_t: (H, V) written; state: (H, K, V) in place; q_t, k_t, g_t: (H, K); v_t: (H, V)
template <class T>
void gla_step(T* o_t, T* state, const T* q_t, const T* k_t, const T* v_t, const T* g_t, int H, int K, int V, T scale) {
  gla_naive_detail::step(o_t, state, q_t, k_t, v_t, g_t, H, K, V, scale);
}

// o: (B, T, H, V) written; q, k, g: (B, T, H, K); v: (B, T, H, V)
template <class T>
void gla_forward_naive(T* o, const T* q, const T* k, const T* v, const T* g, int Bn, int Tn, int H, int K, int V,
                       T scale) {
  std::vector<double> state((size_t)H * K * V);
  for (int b = 0; b < Bn; b++) {
    std::fill(state.begin(), state.end(), 0.0);
    for (int t = 0; t < Tn; t++) {
      const size_t tk = ((size_t)b * Tn + t) * H * K, tv = ((size_t)b * Tn + t) * H * V;
      gla_naive_detail::step(o + tv, state.data(), q + tk, k + tk, v + tv, g + tk, H, K, V, scale);
    }
  }
}

// dq, dk, dg: (B, T, H, K) written; dv: (B, T, H, V) written; dout: (B, T, H, V); inputs as in forward.
//   pass 1 (forward replay):  dq_t = scale · S_t do_t
//   pass 2 (t = T-1 .. 0), dS = gradient of the loss w.r.t. S_t, starting at 0:
//     dS   += scale · q_t do_tᵀ
//     dk_t  = dS v_t,   dv_t = dSᵀ k_t
//     dg_t  = Σ_{s >= t} (q_s ⊙ dq_s − k_s ⊙ dk_s)       (dg_t[a] = Σ_b S_{t-1}[a,b] e^{g_t[a]} dS[a,b],
//                                                         summed up token by token)
//     dS    = diag(exp(g_t)) dS                           (gradient w.r.t. S_{t-1})
template <class T>
void gla_backward_naive(T* dq, T* dk, T* dv, T* dg, const T* dout, const T* q, const T* k, const T* v, const T* g,
                        int Bn, int Tn, int H, int K, int V, T scale) {
  const double s = double(scale);
  std::vector<double> S((size_t)K * V), dS((size_t)K * V), dq_all((size_t)Tn * K), acc(K);
  for (int b = 0; b < Bn; b++)
    for (int h = 0; h < H; h++) {
      // element (t, a) of a (B, T, H, K) tensor and (t, c) of a (B, T, H, V) one, for this (b, h)
      auto ik = [&](int t, int a) { return (((size_t)b * Tn + t) * H + h) * K + a; };
      auto iv = [&](int t, int c) { return (((size_t)b * Tn + t) * H + h) * V + c; };
      // pass 1: replay the state, dq_t = scale · S_t do_t
      std::fill(S.begin(), S.end(), 0.0);
      for (int t = 0; t < Tn; t++)
        for (int a = 0; a < K; a++) {
          const double decay = std::exp(double(g[ik(t, a)]));
          double d = 0;
          for (int c = 0; c < V; c++) {
            double& st = S[(size_t)a * V + c];
            st = decay * st + double(k[ik(t, a)]) * double(v[iv(t, c)]);
            d += st * double(dout[iv(t, c)]);
          }
          dq_all[(size_t)t * K + a] = s * d;
          dq[ik(t, a)] = T(s * d);
        }
      // pass 2: reverse sweep
      std::fill(dS.begin(), dS.end(), 0.0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int t = Tn - 1; t >= 0; t--) {
        for (int a = 0; a < K; a++)
          for (int c = 0; c < V; c++) dS[(size_t)a * V + c] += s * double(q[ik(t, a)]) * double(dout[iv(t, c)]);
        for (int a = 0; a < K; a++) {
          double d = 0;
          for (int c = 0; c < V; c++) d += dS[(size_t)a * V + c] * double(v[iv(t, c)]);
          dk[ik(t, a)] = T(d);
          acc[a] += double(q[ik(t, a)]) * dq_all[(size_t)t * K + a] - double(k[ik(t, a)]) * d;
          dg[ik(t, a)] = T(acc[a]);
        }
        for (int c = 0; c < V; c++) {
          double d = 0;
          for (int a = 0; a < K; a++) d += dS[(size_t)a * V + c] * double(k[ik(t, a)]);
          dv[iv(t, c)] = T(d);
        }
        for (int a = 0; a < K; a++) {
          const double decay = std::exp(double(g[ik(t, a)]));
          for (int c = 0; c < V; c++) dS[(size_t)a * V + c] *= decay;
        }
      }
    }
}

}  // namespace canonlab
