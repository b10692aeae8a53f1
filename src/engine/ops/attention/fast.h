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

// Elements of the softmax state forward keeps for backward: each query row's max score and the reciprocal of its
// sum of exponentials, (B, H, Tn, 2). Backward recomputes the probabilities from them with the same operations, so
// it gets forward's bits without a (Tn, Tn) matrix per (b, h) living from forward to backward.
inline size_t attention_state_size(int B, int Tn, int H) { return size_t(B) * H * Tn * 2; }

// Elements of scratch attention_forward and attention_backward need when run with `threads` OpenMP threads: a
// (Tn, Tn) probabilities panel and a (Tn, Tn) dS matrix per thread. Pass thread_count() (engine/threads.h).
inline size_t attention_scratch_size(int Tn, int threads) { return size_t(threads) * 2 * Tn * Tn; }

namespace attention_detail {
// Rows [t0, t1) of P (row stride Tn): S = scale · Q Kᵀ on the block's keys [k0, t1) in one GEMM, ALiBi, then each
// row's softmax over its keys [lo(t), t], zero elsewhere in the row. Forward finds each row's max and 1/sum and
// writes them to stats_out (Tn, 2); backward passes them back as stats_in and gets forward's bits: the same GEMM
// call, the same exp of the same differences, the same product with the same reciprocal.
template <class T>
void softmax_rows(T* P, T* stats_out, const T* stats_in, const T* Q, const T* K, int ld_qkv, const T* alibi_slopes,
                  T slope, int window, int Tn, int D, T scale, int t0, int t1) {
  const int tb = t1 - t0, k0 = window_start(t0, window), kn = t1 - k0;
  gemm(false, true, tb, kn, D, scale, Q + (size_t)t0 * ld_qkv, ld_qkv, K + (size_t)k0 * ld_qkv, ld_qkv, T(0),
       P + (size_t)t0 * Tn + k0, Tn);
  for (int t = t0; t < t1; t++) {
    // pt[lo..t] are this query's scores; the rest of the row is masked (and partly GEMM output in [k0, lo))
    T* pt = P + (size_t)t * Tn;
    const int lo = window_start(t, window), n = t + 1 - lo;
    T* ps = pt + lo;
    if (alibi_slopes)
      for (int s = lo; s <= t; s++) pt[s] -= slope * T(t - s);
    const T mx = stats_in ? stats_in[2 * t] : vec_max(ps, n);
    for (int i = 0; i < n; i++) ps[i] = vec_exp(ps[i] - mx);
    const T inv = stats_in ? stats_in[2 * t + 1] : T(1) / vec_sum(ps, n);
    if (stats_out) stats_out[2 * t] = mx, stats_out[2 * t + 1] = inv;
    for (int i = 0; i < n; i++) ps[i] *= inv;
    // zeros on both sides: the PV GEMM reads [k0, t1), backward's transposed products read whole columns
    for (int s = 0; s < lo; s++) pt[s] = T(0);
    for (int s = t + 1; s < Tn; s++) pt[s] = T(0);
  }
}
}  // namespace attention_detail

// out: (B, Tn, H, D) contiguous; state: attention_state_size(B, Tn, H), written, what backward reads;
// probs: (B, H, Tn, Tn), zero outside each query's keys (every entry written), or nullptr when nobody looks at them
// (training); q, k, v: (B, Tn, H, D) token rows of stride ld_qkv; alibi_slopes: (H) or nullptr;
// window: 0 = full causal, w > 0 = query t sees keys t − w < s <= t;
// scratch: attention_scratch_size(Tn, thread_count()) elements (unused when probs is given), need not be initialised.
template <class T>
void attention_forward(T* out, T* state, T* probs, const T* q, const T* k, const T* v, int ld_qkv,
                       const T* alibi_slopes, int window, int B, int Tn, int H, int D, T scale, T* scratch) {
  using attention_detail::window_start;
  constexpr int TB = attention_detail::kRowBlock;
  const int C = H * D;
  // a window of Tn or more masks nothing: take the full-causal path (also keeps s1 − 1 + window from overflowing)
  if (window >= Tn) window = 0;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; bh++) {
    const int b = bh / H, h = bh % H;
    // Q, K, V: (Tn, D) rows of stride ld_qkv; P: (Tn, Tn), the caller's or this thread's panel; O: (Tn, D) rows of
    // stride C
    const T* Q = q + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* K = k + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    const T* V = v + (size_t)b * Tn * ld_qkv + (size_t)h * D;
    T* P = probs ? probs + (size_t)bh * Tn * Tn : scratch + (size_t)omp_get_thread_num() * 2 * Tn * Tn;
    T* O = out + (size_t)b * Tn * C + (size_t)h * D;
    T* stats = state + (size_t)bh * Tn * 2;
    const T slope = alibi_slopes ? alibi_slopes[h] : T(0);
    for (int t0 = 0; t0 < Tn; t0 += TB) {
      // keys [k0, t1) cover every query of the block; rows later in the block start further right
      const int t1 = std::min(t0 + TB, Tn), tb = t1 - t0, k0 = window_start(t0, window), kn = t1 - k0;
      attention_detail::softmax_rows(P, stats, static_cast<const T*>(nullptr), Q, K, ld_qkv, alibi_slopes, slope,
                                     window, Tn, D, scale, t0, t1);
      // O[t0:t1] = P[t0:t1, k0:t1] V[k0:t1]
      gemm(false, false, tb, D, kn, T(1), P + (size_t)t0 * Tn + k0, Tn, V + (size_t)k0 * ld_qkv, ld_qkv, T(0),
           O + (size_t)t0 * C, C);
    }
  }
}

// dq, dk, dv: (B, Tn, H, D) token rows of stride ld_dqkv, written; dout: (B, Tn, H, D) contiguous;
// state: from forward with the same inputs, slopes and window; scratch: attention_scratch_size(Tn, thread_count())
// elements, need not be initialised.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, int ld_dqkv, const T* dout, const T* state, const T* q, const T* k,
                        const T* v, int ld_qkv, const T* alibi_slopes, int window, int B, int Tn, int H, int D, T scale,
                        T* scratch) {
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
    const T* stats = state + (size_t)bh * Tn * 2;
    const T* dO = dout + (size_t)b * Tn * C + (size_t)h * D;
    T* dQ = dq + (size_t)b * Tn * ld_dqkv + (size_t)h * D;
    T* dK = dk + (size_t)b * Tn * ld_dqkv + (size_t)h * D;
    T* dV = dv + (size_t)b * Tn * ld_dqkv + (size_t)h * D;
    const T slope = alibi_slopes ? alibi_slopes[h] : T(0);
    // P: (Tn, Tn), forward's probabilities, recomputed row block by row block into this thread's panel.
    // dS: (Tn, Tn), this thread's. Row t of block [t0, t1) is written on columns [k0, t1), with k0 the block's
    // first key rounded down to a multiple of TB, and is zero there outside [lo(t), t]. The key blocks of the
    // transposed products below are multiples of TB too and never start left of k0, so they read only
    // written entries, never a stale value from another (b, h) pair.
    T* P = scratch + (size_t)omp_get_thread_num() * 2 * Tn * Tn;
    T* dS = P + (size_t)Tn * Tn;
    for (int t0 = 0; t0 < Tn; t0 += TB) {
      const int t1 = std::min(t0 + TB, Tn), tb = t1 - t0, k0 = window_start(t0, window) / TB * TB, kn = t1 - k0;
      attention_detail::softmax_rows(P, static_cast<T*>(nullptr), stats, Q, K, ld_qkv, alibi_slopes, slope, window,
                                     Tn, D, scale, t0, t1);
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
