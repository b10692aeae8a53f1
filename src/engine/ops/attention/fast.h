#pragma once
// Causal softmax attention with optional ALiBi and an optional sliding window, threaded over (b, h) pairs.
// Each pair is a handful of single-threaded GEMMs (OpenBLAS's OpenMP build runs serially inside our parallel
// region), so the pairs scale across cores without BLAS and OpenMP threads competing.
//
// The mask is exploited in blocks of kRowBlock query rows: rows [t0, t1) only see keys [lo(t0), t1), where
// lo(t) = max(0, t − w + 1) is the first key of query t (0 without a window), so each GEMM stops at the
// block's diagonal and, with a window w, starts at the window of the block's first row: about half of the
// upper triangle is never computed, and with a window the work per block is O(TB · (TB + w)) not O(TB · t).
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

// First key query t sees: t − window < s <= t, or every s <= t when window is 0.
inline int window_start(int t, int window) { return window > 0 ? std::max(0, t - window + 1) : 0; }
}  // namespace attention_detail

// Elements of scratch attention_backward needs when run with `threads` OpenMP threads: one (Tn, Tn) dS
// matrix per thread. Pass thread_count() (engine/threads.h) as threads.
inline size_t attention_scratch_size(int Tn, int threads) { return (size_t)threads * Tn * Tn; }

// out: (B, Tn, H, D) contiguous; probs: (B, H, Tn, Tn), zero outside each query's keys (every entry written);
// q, k, v: (B, Tn, H, D) token rows of stride ld_qkv; alibi_slopes: (H) or nullptr;
// window: 0 = full causal, w > 0 = query t sees keys t − w < s <= t
template <class T>
void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int ld_qkv, const T* alibi_slopes,
                       int window, int B, int Tn, int H, int D, T scale) {
  using attention_detail::window_start;
  constexpr int TB = attention_detail::kRowBlock;
  const int C = H * D;
  // a window of Tn or more masks nothing: take the full-causal path (also keeps s1 − 1 + window from overflowing)
  if (window >= Tn) window = 0;
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
      // keys [k0, t1) cover every query of the block; rows later in the block start further right
      const int t1 = std::min(t0 + TB, Tn), tb = t1 - t0, k0 = window_start(t0, window), kn = t1 - k0;
      // S[t0:t1, k0:t1] = scale · Q[t0:t1] K[k0:t1]^T, written straight into P
      gemm(false, true, tb, kn, D, scale, Q + (size_t)t0 * ld_qkv, ld_qkv, K + (size_t)k0 * ld_qkv, ld_qkv, T(0),
           P + (size_t)t0 * Tn + k0, Tn);
      for (int t = t0; t < t1; t++) {
        // pt[lo..t] are this query's scores; the rest of the row is masked (and partly GEMM output in [k0, lo))
        T* pt = P + (size_t)t * Tn;
        const int lo = window_start(t, window), n = t + 1 - lo;
        T* ps = pt + lo;
        if (alibi_slopes)
          for (int s = lo; s <= t; s++) pt[s] -= slope * T(t - s);
        const T mx = vec_max(ps, n);
        for (int i = 0; i < n; i++) ps[i] = vec_exp(ps[i] - mx);
        const T inv = T(1) / vec_sum(ps, n);
        for (int i = 0; i < n; i++) ps[i] *= inv;
        // zeros on both sides: the PV GEMM below reads [k0, t1), backward reads whole rows
        for (int s = 0; s < lo; s++) pt[s] = T(0);
        for (int s = t + 1; s < Tn; s++) pt[s] = T(0);
      }
      // O[t0:t1] = P[t0:t1, k0:t1] V[k0:t1]
      gemm(false, false, tb, D, kn, T(1), P + (size_t)t0 * Tn + k0, Tn, V + (size_t)k0 * ld_qkv, ld_qkv, T(0),
           O + (size_t)t0 * C, C);
    }
  }
}

// dq, dk, dv: (B, Tn, H, D) token rows of stride ld_dqkv, written; dout: (B, Tn, H, D) contiguous;
// probs: (B, H, Tn, Tn) from forward with the same window; scratch: attention_scratch_size(Tn, thread_count())
// elements, need not be initialised.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, int ld_dqkv, const T* dout, const T* probs, const T* q, const T* k,
                        const T* v, int ld_qkv, int window, int B, int Tn, int H, int D, T scale, T* scratch) {
  using attention_detail::window_start;
  constexpr int TB = attention_detail::kRowBlock;
  const int C = H * D;
  // a window of Tn or more masks nothing: take the full-causal path (also keeps s1 − 1 + window from overflowing)
  if (window >= Tn) window = 0;
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
    // dS: (Tn, Tn), this thread's. Row t of block [t0, t1) is written on columns [k0, t1), with k0 the block's
    // first key rounded down to a multiple of TB, and is zero there outside [lo(t), t]. The key blocks of the
    // transposed products below are multiples of TB too and never start left of k0, so they read only
    // written entries, never a stale value from another (b, h) pair.
    T* dS = scratch + (size_t)omp_get_thread_num() * Tn * Tn;
    for (int t0 = 0; t0 < Tn; t0 += TB) {
      const int t1 = std::min(t0 + TB, Tn), tb = t1 - t0, k0 = window_start(t0, window) / TB * TB, kn = t1 - k0;
      // dP[t0:t1, k0:t1] = dO[t0:t1] V[k0:t1]^T
      gemm(false, true, tb, kn, D, T(1), dO + (size_t)t0 * C, C, V + (size_t)k0 * ld_qkv, ld_qkv, T(0),
           dS + (size_t)t0 * Tn + k0, Tn);
      for (int t = t0; t < t1; t++) {
        const T* pt = P + (size_t)t * Tn;
        T* dst = dS + (size_t)t * Tn;
        const int lo = window_start(t, window);
        // softmax backward, with the score scale folded in: dS = scale · P ⊙ (dP − rowsum(dP ⊙ P))
        const T rowdot = vec_dot(dst + lo, pt + lo, t + 1 - lo);
        for (int s = lo; s <= t; s++) dst[s] = scale * pt[s] * (dst[s] - rowdot);
        // the products below read these masked entries left of the window and in the diagonal block
        for (int s = k0; s < lo; s++) dst[s] = T(0);
        for (int s = t + 1; s < t1; s++) dst[s] = T(0);
      }
      // dQ[t0:t1] = dS[t0:t1, k0:t1] K[k0:t1]
      gemm(false, false, tb, D, kn, T(1), dS + (size_t)t0 * Tn + k0, Tn, K + (size_t)k0 * ld_qkv, ld_qkv, T(0),
           dQ + (size_t)t0 * ld_dqkv, ld_dqkv);
    }
    // Keys [s0, s1) are only seen by queries s0 <= t < s1 − 1 + w (every t >= s0 without a window).
    for (int s0 = 0; s0 < Tn; s0 += TB) {
      const int s1 = std::min(s0 + TB, Tn), sb = s1 - s0;
      const int r1 = window > 0 ? std::min(Tn, s1 - 1 + window) : Tn, rows = r1 - s0;
      // dK[s0:s1] = dS[s0:r1, s0:s1]^T Q[s0:r1]
      gemm(true, false, sb, D, rows, T(1), dS + (size_t)s0 * Tn + s0, Tn, Q + (size_t)s0 * ld_qkv, ld_qkv, T(0),
           dK + (size_t)s0 * ld_dqkv, ld_dqkv);
      // dV[s0:s1] = P[s0:r1, s0:s1]^T dO[s0:r1]
      gemm(true, false, sb, D, rows, T(1), P + (size_t)s0 * Tn + s0, Tn, dO + (size_t)s0 * C, C, T(0),
           dV + (size_t)s0 * ld_dqkv, ld_dqkv);
    }
  }
}

}  // namespace canonlab
