#pragma once
// Reference (gated) delta rule: the plain per-token recurrence of Gated DeltaNet (scalar log-decay g per head
// and step) and DeltaNet (g == nullptr, no decay). One thread, state and accumulators in double. The state of
// one head is S: (K, V), S_0 = 0, and each token does
//   S <- exp(g_t) S                  decay first ("forget before error", as fla's naive_recurrent_gated_delta_rule)
//   u  = beta_t (v_t − Sᵀ k_t)       the delta against the decayed state
//   S <- S + k_t uᵀ
//   o_t = scale · Sᵀ q_t
// Nothing here assumes q, k are L2-normalised (the caller normalises them; the math is the same either way).
// The backward is the recurrent one derived in ../shared/reference/linear-mixers.md §3.5.
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/error.h"

namespace canonlab {

// Elements of the `states` buffer: one (K, V) state per (batch, head, chunk), taken at the chunk's start
// (delta_rule_forward_chunked and the GPU kernels save them for backward).
inline size_t delta_rule_states_size(int Bn, int Tn, int H, int K, int V, int chunk) {
  CANONLAB_CHECK(chunk >= 1, "delta_rule: chunk size must be at least 1");
  const size_t nchunks = Tn > 0 ? ((size_t)Tn + chunk - 1) / chunk : 0;
  return (size_t)Bn * H * nchunks * K * V;
}


namespace delta_rule_detail {

// One token of one head. St is the state's scalar type (double in the naive loop, T in delta_rule_step);
// accumulators are double either way. pred: V doubles of scratch.
// o: (V); state: (K, V) in place; q, k: (K); v: (V); g: the log decay, or nullptr for none
template <class St, class T>
void delta_rule_step_head(T* o, St* state, const T* q, const T* k, const T* v, T beta, const T* g, int K, int V,
                          T scale, double* pred) {
  const double a = g ? std::exp(double(*g)) : 1.0;
  // pred = (a S)ᵀ k, against the decayed state
  for (int j = 0; j < V; j++) pred[j] = 0;
  for (int i = 0; i < K; i++) {
    const St* s = state + (size_t)i * V;
    const double ki = double(k[i]);
    for (int j = 0; j < V; j++) pred[j] += double(s[j]) * ki;
  }
  // pred becomes u = beta (v − a·pred)
  for (int j = 0; j < V; j++) pred[j] = double(beta) * (double(v[j]) - a * pred[j]);
  // S <- a S + k uᵀ
  for (int i = 0; i < K; i++) {
    St* s = state + (size_t)i * V;
    const double ki = double(k[i]);
    for (int j = 0; j < V; j++) s[j] = St(a * double(s[j]) + ki * pred[j]);
  }
  // o = scale Sᵀ q
  for (int j = 0; j < V; j++) {
    double acc = 0;
    for (int i = 0; i < K; i++) acc += double(state[(size_t)i * V + j]) * double(q[i]);
    o[j] = T(double(scale) * acc);
  }
}

}  // namespace delta_rule_detail

// One token of one batch element, for decoding. state: (H, K, V) in place (zeros before the first token);
// o_t: (H, V) written; q_t, k_t: (H, K); v_t: (H, V); beta_t: (H); g_t: (H) or nullptr (DeltaNet)
template <class T>
void delta_rule_step(T* o_t, T* state, const T* q_t, const T* k_t, const T* v_t, const T* beta_t, const T* g_t, int H,
                     int K, int V, T scale) {
  std::vector<double> pred(V);
  for (int h = 0; h < H; h++)
    delta_rule_detail::delta_rule_step_head(o_t + (size_t)h * V, state + (size_t)h * K * V, q_t + (size_t)h * K,
                                            k_t + (size_t)h * K, v_t + (size_t)h * V, beta_t[h],
                                            g_t ? g_t + h : nullptr, K, V, scale, pred.data());
}

// o: (B, T, H, V) written; q, k: (B, T, H, K); v: (B, T, H, V); beta: (B, T, H); g: (B, T, H) or nullptr
template <class T>
void delta_rule_forward_naive(T* o, const T* q, const T* k, const T* v, const T* beta, const T* g, int Bn, int Tn,
                              int H, int K, int V, T scale) {
  std::vector<double> S((size_t)K * V), pred(V);
  for (int b = 0; b < Bn; b++)
    for (int h = 0; h < H; h++) {
      for (auto& s : S) s = 0;
      for (int t = 0; t < Tn; t++) {
        const size_t bth = ((size_t)b * Tn + t) * H + h;  // index of (b, t, h)
        delta_rule_detail::delta_rule_step_head(o + bth * V, S.data(), q + bth * K, k + bth * K, v + bth * V,
                                                beta[bth], g ? g + bth : nullptr, K, V, scale, pred.data());
      }
    }
}

// dq, dk: (B, T, H, K), dv: (B, T, H, V), dbeta: (B, T, H), dg: (B, T, H), all written; dg may be nullptr
// (and must be when g is); dout: (B, T, H, V); the rest as in forward.
// Per head: recompute and keep every state S_0..S_T, then walk back with dS = ∂L/∂S_t (zero after the last
// token). With a = exp(g_t), S' = a S_{t−1}, e = v_t − S'ᵀ k_t, u = beta_t e, S_t = S' + k_t uᵀ:
//   dq_t = scale S_t do_t;  dS += scale q_t do_tᵀ
//   du = dSᵀ k_t;  dv_t = beta_t du;  dbeta_t = <du, e>;  dpred = −beta_t du
//   dk_t = dS u + S' dpred;  dS' = dS + k_t dpredᵀ;  dg_t = <S', dS'>_F;  dS <- a dS'
template <class T>
void delta_rule_backward_naive(T* dq, T* dk, T* dv, T* dbeta, T* dg, const T* dout, const T* q, const T* k, const T* v,
                               const T* beta, const T* g, int Bn, int Tn, int H, int K, int V, T scale) {
  CANONLAB_CHECK(g || !dg, "delta_rule: dg requires g");
  const size_t KV = (size_t)K * V;
  std::vector<double> S((size_t)(Tn + 1) * KV);  // S[t]: state after t tokens
  std::vector<double> dS(KV), Sp(KV), e(V), u(V), du(V), dpred(V);
  const double s = double(scale);
  for (int b = 0; b < Bn; b++)
    for (int h = 0; h < H; h++) {
      // forward, keeping every state
      for (size_t x = 0; x < KV; x++) S[x] = 0;
      for (int t = 0; t < Tn; t++) {
        const size_t bth = ((size_t)b * Tn + t) * H + h;
        const double a = g ? std::exp(double(g[bth])) : 1.0;
        const double* S0 = &S[(size_t)t * KV];
        double* S1 = &S[(size_t)(t + 1) * KV];
        const T* kt = k + bth * K;
        const T* vt = v + bth * V;
        for (int j = 0; j < V; j++) e[j] = 0;
        for (int i = 0; i < K; i++)
          for (int j = 0; j < V; j++) e[j] += a * S0[(size_t)i * V + j] * double(kt[i]);
        for (int j = 0; j < V; j++) u[j] = double(beta[bth]) * (double(vt[j]) - e[j]);
        for (int i = 0; i < K; i++)
          for (int j = 0; j < V; j++) S1[(size_t)i * V + j] = a * S0[(size_t)i * V + j] + double(kt[i]) * u[j];
      }
      // backward
      for (size_t x = 0; x < KV; x++) dS[x] = 0;
      for (int t = Tn - 1; t >= 0; t--) {
        const size_t bth = ((size_t)b * Tn + t) * H + h;
        const double a = g ? std::exp(double(g[bth])) : 1.0;
        const double bt = double(beta[bth]);
        const double* St = &S[(size_t)(t + 1) * KV];
        const double* Sm = &S[(size_t)t * KV];
        const T* qt = q + bth * K;
        const T* kt = k + bth * K;
        const T* vt = v + bth * V;
        const T* dot = dout + bth * V;
        for (size_t x = 0; x < KV; x++) Sp[x] = a * Sm[x];
        // e = v − S'ᵀ k, u = beta e
        for (int j = 0; j < V; j++) {
          double p = 0;
          for (int i = 0; i < K; i++) p += Sp[(size_t)i * V + j] * double(kt[i]);
          e[j] = double(vt[j]) - p;
          u[j] = bt * e[j];
        }
        // dq_t = scale S_t do_t
        for (int i = 0; i < K; i++) {
          double acc = 0;
          for (int j = 0; j < V; j++) acc += St[(size_t)i * V + j] * double(dot[j]);
          dq[bth * K + i] = T(s * acc);
        }
        // dS += scale q doᵀ
        for (int i = 0; i < K; i++)
          for (int j = 0; j < V; j++) dS[(size_t)i * V + j] += s * double(qt[i]) * double(dot[j]);
        // du = dSᵀ k
        double db = 0;
        for (int j = 0; j < V; j++) {
          double acc = 0;
          for (int i = 0; i < K; i++) acc += dS[(size_t)i * V + j] * double(kt[i]);
          du[j] = acc;
          dv[bth * V + j] = T(bt * acc);
          db += acc * e[j];
          dpred[j] = -bt * acc;
        }
        dbeta[bth] = T(db);
        // dk = dS u + S' dpred
        for (int i = 0; i < K; i++) {
          double acc = 0;
          for (int j = 0; j < V; j++) acc += dS[(size_t)i * V + j] * u[j] + Sp[(size_t)i * V + j] * dpred[j];
          dk[bth * K + i] = T(acc);
        }
        // dS' = dS + k dpredᵀ; dg = <S', dS'>; dS_{t−1} = a dS'
        double dgt = 0;
        for (int i = 0; i < K; i++)
          for (int j = 0; j < V; j++) {
            const size_t x = (size_t)i * V + j;
            const double d = dS[x] + double(kt[i]) * dpred[j];
            dgt += Sp[x] * d;
            dS[x] = a * d;
          }
        if (dg) dg[bth] = T(dgt);
      }
    }
}

}  // namespace canonlab
