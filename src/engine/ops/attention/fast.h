#pragma once
// Causal softmax attention with optional ALiBi, threaded over (b, h) pairs. Each pair is a handful of
// single-threaded GEMMs (OpenBLAS's OpenMP build runs serially inside our parallel region), so the pairs
// scale across cores without BLAS and OpenMP threads competing.
//
// The causal mask is exploited in blocks of kRowBlock query rows: rows [t0, t1) only see keys [0, t1), so
// each GEMM stops at the block's diagonal and about half of the upper triangle is never computed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/blas.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace attention_detail {
// Larger blocks waste more of the upper triangle, smaller ones make the GEMMs too thin to run at speed.
constexpr int kRowBlock = 64;
}  // namespace attention_detail

// Elements of scratch attention_backward needs when run with `threads` OpenMP threads: one (Tn, Tn) dS
// matrix per thread. Pass thread_count() (engine/threads.h) as threads.
inline size_t attention_scratch_size(int Tn, int threads) { return (size_t)threads * Tn * Tn; }

// out: (B, Tn, H, D) contiguous; probs: (B, H, Tn, Tn), zeros above the diagonal;
// q, k, v: (B, Tn, H, D) token rows of stride ld_qkv; alibi_slopes: (H) or nullptr
template <class T>
void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int ld_qkv, const T* alibi_slopes, int B,
                       int Tn, int H, int D, T scale) {
  constexpr int TB = attention_detail::kRowBlock;
  const int C = H * D;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; bh++) {
    const int b = bh / H, h = bh % H;
    // Q, K, V: (Tn, D) rows of stride ld_qkv; P: (Tn, Tn); O: (Tn, D) rows of stride C
    const T* Q = q + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* K = k + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* V = v + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    T* P = probs + (size_t)bh * Tn * Tn;
    T* O = out + (size_t)b * Tn * C + (size_t)h * D;
    const T slope = alibi_slopes ? alibi_slopes[h] : T(0);
    for (int t0 = 0; t0 < Tn; t0 += TB) {
      const int t1 = std::min(t0 + TB, Tn), tb = t1 - t0;
      // S[t0:t1, 0:t1] = scale · Q[t0:t1] K[0:t1]^T, written straight into P
      gemm(false, true, tb, t1, D, scale, Q + (size_t)t0 * ld_qkv, ld_qkv, K, ld_qkv, T(0), P + (size_t)t0 * Tn, Tn);
      for (int t = t0; t < t1; t++) {
        T* pt = P + (size_t)t * Tn;
        if (alibi_slopes)
          for (int s = 0; s <= t; s++) pt[s] -= slope * T(t - s);
        const T mx = vec_max(pt, t + 1);
        for (int s = 0; s <= t; s++) pt[s] = vec_exp(pt[s] - mx);
        const T inv = T(1) / vec_sum(pt, t + 1);
        for (int s = 0; s <= t; s++) pt[s] *= inv;
        for (int s = t + 1; s < Tn; s++) pt[s] = T(0);
      }
      // O[t0:t1] = P[t0:t1, 0:t1] V[0:t1]
      gemm(false, false, tb, D, t1, T(1), P + (size_t)t0 * Tn, Tn, V, ld_qkv, T(0), O + (size_t)t0 * C, C);
    }
  }
}

// dq, dk, dv: (B, Tn, H, D) token rows of stride ld_dqkv, written; dout: (B, Tn, H, D) contiguous;
// probs: (B, H, Tn, Tn) from forward; scratch: attention_scratch_size(Tn, thread_count()) elements.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, int ld_dqkv, const T* dout, const T* probs, const T* q, const T* k,
                        const T* v, int ld_qkv, int B, int Tn, int H, int D, T scale, T* scratch) {
  constexpr int TB = attention_detail::kRowBlock;
  const int C = H * D;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; bh++) {
    const int b = bh / H, h = bh % H;
    const T* Q = q + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* K = k + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* V = v + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* P = probs + (size_t)bh * Tn * Tn;
    const T* dO = dout + (size_t)b * Tn * C + (size_t)h * D;
    T* dQ = dq + (size_t)b * Tn * ld_dqkv + (size_t)h * D;
    T* dK = dk + (size_t)b * Tn * ld_dqkv + (size_t)h * D;
    T* dV = dv + (size_t)b * Tn * ld_dqkv + (size_t)h * D;
    // dS: (Tn, Tn), this thread's; filled block by block up to each block's diagonal, zero above the diagonal
    T* dS = scratch + (size_t)omp_get_thread_num() * Tn * Tn;
    for (int t0 = 0; t0 < Tn; t0 += TB) {
      const int t1 = std::min(t0 + TB, Tn), tb = t1 - t0;
      // dP[t0:t1, 0:t1] = dO[t0:t1] V[0:t1]^T
      gemm(false, true, tb, t1, D, T(1), dO + (size_t)t0 * C, C, V, ld_qkv, T(0), dS + (size_t)t0 * Tn, Tn);
      for (int t = t0; t < t1; t++) {
        const T* pt = P + (size_t)t * Tn;
        T* dst = dS + (size_t)t * Tn;
        // softmax backward, with the score scale folded in: dS = scale · P ⊙ (dP − rowsum(dP ⊙ P))
        const T rowdot = vec_dot(dst, pt, t + 1);
        for (int s = 0; s <= t; s++) dst[s] = scale * pt[s] * (dst[s] - rowdot);
        // the transposed products below read these masked entries of the diagonal block
        for (int s = t + 1; s < t1; s++) dst[s] = T(0);
      }
      // dQ[t0:t1] = dS[t0:t1, 0:t1] K[0:t1]
      gemm(false, false, tb, D, t1, T(1), dS + (size_t)t0 * Tn, Tn, K, ld_qkv, T(0), dQ + (size_t)t0 * ld_dqkv,
           ld_dqkv);
    }
    // Keys [s0, s1) are only seen by queries t >= s0.
    for (int s0 = 0; s0 < Tn; s0 += TB) {
      const int s1 = std::min(s0 + TB, Tn), sb = s1 - s0, rows = Tn - s0;
      // dK[s0:s1] = dS[s0:Tn, s0:s1]^T Q[s0:Tn]
      gemm(true, false, sb, D, rows, T(1), dS + (size_t)s0 * Tn + s0, Tn, Q + (size_t)s0 * ld_qkv, ld_qkv, T(0),
           dK + (size_t)s0 * ld_dqkv, ld_dqkv);
      // dV[s0:s1] = P[s0:Tn, s0:s1]^T dO[s0:Tn]
      gemm(true, false, sb, D, rows, T(1), P + (size_t)s0 * Tn + s0, Tn, dO + (size_t)s0 * C, C, T(0),
           dV + (size_t)s0 * ld_dqkv, ld_dqkv);
    }
  }
}

}  // namespace canonlab
