#pragma once
// Reference causal softmax attention with optional ALiBi and an optional sliding window. Plain loops over
// (b, h, t, s), one thread, double accumulators. q/k/v are (B, Tn, H, D) token rows of stride ld_qkv so they
// can be column blocks of a fused (B, Tn, 3C) projection; out is contiguous (B, Tn, H, D).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace canonlab {

// out: (B, Tn, H, D) contiguous; probs: (B, H, Tn, Tn), zero outside each query's keys;
// q, k, v: (B, Tn, H, D) token rows of stride ld_qkv; alibi_slopes: (H) or nullptr;
// window: 0 = full causal, w > 0 = query t sees keys t − w < s <= t
template <class T>
void attention_forward_naive(T* out, T* probs, const T* q, const T* k, const T* v, int ld_qkv, const T* alibi_slopes,
                             int window, int B, int Tn, int H, int D, T scale) {
  const size_t C = (size_t)H * D;
  std::vector<double> score(Tn), acc(D);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      double slope = alibi_slopes ? double(alibi_slopes[h]) : 0.0;
      for (int t = 0; t < Tn; t++) {
        const T* qt = q + ((size_t)b * Tn + t) * ld_qkv + (size_t)h * D;
        const int lo = window > 0 ? std::max(0, t - window + 1) : 0;  // first key this query sees
        double mx = -INFINITY;
        for (int s = lo; s <= t; s++) {
          const T* ks = k + ((size_t)b * Tn + s) * ld_qkv + (size_t)h * D;
          double dot = 0;
          for (int d = 0; d < D; d++) dot += double(qt[d]) * double(ks[d]);
          score[s] = double(scale) * dot - slope * double(t - s);
          if (score[s] > mx) mx = score[s];
        }
        double sum = 0;
        for (int s = lo; s <= t; s++) {
          score[s] = std::exp(score[s] - mx);
          sum += score[s];
        }
        T* pt = probs + (((size_t)b * H + h) * Tn + t) * Tn;
        for (int d = 0; d < D; d++) acc[d] = 0;
        for (int s = 0; s < Tn; s++) {
          if (s < lo || s > t) {
            pt[s] = T(0);
            continue;
          }
          double p = score[s] / sum;
          pt[s] = T(p);
          const T* vs = v + ((size_t)b * Tn + s) * ld_qkv + (size_t)h * D;
          for (int d = 0; d < D; d++) acc[d] += p * double(vs[d]);
        }
        T* ot = out + ((size_t)b * Tn + t) * C + (size_t)h * D;
        for (int d = 0; d < D; d++) ot[d] = T(acc[d]);
      }
    }
}

// dq, dk, dv: (B, Tn, H, D) token rows of stride ld_dqkv, written; dout: (B, Tn, H, D) contiguous;
// probs: (B, H, Tn, Tn) from forward with the same window. scratch is accepted for signature parity with the fast
// path and unused.
template <class T>
void attention_backward_naive(T* dq, T* dk, T* dv, int ld_dqkv, const T* dout, const T* probs, const T* q, const T* k,
                              const T* v, int ld_qkv, int window, int B, int Tn, int H, int D, T scale, T* scratch) {
  (void)scratch;
  const size_t C = (size_t)H * D;
  // dk, dv gather contributions from every later query, so they are accumulated per (b, h) in double
  std::vector<double> dP(Tn), dkacc((size_t)Tn * D), dvacc((size_t)Tn * D), dqacc(D);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      for (auto& x : dkacc) x = 0;
      for (auto& x : dvacc) x = 0;
      for (int t = 0; t < Tn; t++) {
        const T* pt = probs + (((size_t)b * H + h) * Tn + t) * Tn;
        const T* dot_ = dout + ((size_t)b * Tn + t) * C + (size_t)h * D;
        const T* qt = q + ((size_t)b * Tn + t) * ld_qkv + (size_t)h * D;
        const int lo = window > 0 ? std::max(0, t - window + 1) : 0;
        // dP = dO v^T; softmax backward: dS = P ⊙ (dP − rowsum(dP ⊙ P))
        double rowdot = 0;
        for (int s = lo; s <= t; s++) {
          const T* vs = v + ((size_t)b * Tn + s) * ld_qkv + (size_t)h * D;
          double acc = 0;
          for (int d = 0; d < D; d++) acc += double(dot_[d]) * double(vs[d]);
          dP[s] = acc;
          rowdot += acc * double(pt[s]);
        }
        for (int d = 0; d < D; d++) dqacc[d] = 0;
        for (int s = lo; s <= t; s++) {
          double p = pt[s];
          double dS = p * (dP[s] - rowdot);
          const T* ks = k + ((size_t)b * Tn + s) * ld_qkv + (size_t)h * D;
          for (int d = 0; d < D; d++) {
            dqacc[d] += double(scale) * dS * double(ks[d]);
            dkacc[(size_t)s * D + d] += double(scale) * dS * double(qt[d]);
            dvacc[(size_t)s * D + d] += p * double(dot_[d]);
          }
        }
        T* dqt = dq + ((size_t)b * Tn + t) * ld_dqkv + (size_t)h * D;
        for (int d = 0; d < D; d++) dqt[d] = T(dqacc[d]);
      }
      for (int s = 0; s < Tn; s++) {
        T* dks = dk + ((size_t)b * Tn + s) * ld_dqkv + (size_t)h * D;
        T* dvs = dv + ((size_t)b * Tn + s) * ld_dqkv + (size_t)h * D;
        for (int d = 0; d < D; d++) {
          dks[d] = T(dkacc[(size_t)s * D + d]);
          dvs[d] = T(dvacc[(size_t)s * D + d]);
        }
      }
    }
}

}  // namespace canonlab
