#pragma once
// Chunked GLA (fla's chunk_gla, on the CPU): the training form of the recurrence in gla/naive.h,
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t      (per (b, h), S: K x V, S_0 = 0)
// Time is cut into chunks of `chunk` tokens (the last one may be shorter). Inside a chunk, with G the
// cumulative sum of g from the chunk start (G_i includes g_i), S0 the state at the chunk start and G_L the
// last row of G:
//   o_i   = scale · ( (q_i ⊙ e^{G_i})ᵀ S0 + Σ_{j <= i} A_ij v_j ),   A_ij = Σ_a q_ia k_ja e^{G_ia − G_ja}
//   S_end = diag(e^{G_L}) S0 + Σ_j (k_j ⊙ e^{G_L − G_j}) v_jᵀ
// Every exponent above is <= 0 as written, except inside A, where e^{G_i − G_j} cannot be split into a
// query factor times a key factor without one of them growing (e^{−G_j} overflows once a channel has decayed
// by more than ~88 within the chunk). fla's secondary chunking fixes that: A is built from sub-blocks of
// kSub rows. An off-diagonal block (queries in sub-chunk I, keys j before it) uses the reference point
// gn = G at the first row of I:
//   A_ij = Σ_a (q_ia e^{G_ia − gn_a}) (k_ja e^{gn_a − G_ja})      both exponents <= 0, one GEMM per sub-chunk
// and a diagonal block is computed elementwise (diag_scores).
//
// Backward runs over the chunks in reverse carrying dS, the gradient w.r.t. the state at the end of the
// current chunk from all later tokens, and recomputes everything inside a chunk from the chunk-start states the
// forward saved. With dA_ij = scale · do_i·v_j (only j <= i is used):
//   dq_i = scale · e^{G_i} ⊙ (S0 do_i) + Σ_{j<=i} dA_ij k_j ⊙ e^{G_i − G_j}
//   dk_j = e^{G_L − G_j} ⊙ (dS v_j)    + Σ_{i>=j} dA_ij q_i ⊙ e^{G_i − G_j}
//   dv_j = scale · Σ_{i>=j} A_ij do_i  + dSᵀ (k_j ⊙ e^{G_L − G_j})
//   dS  <- diag(e^{G_L}) dS + scale · Σ_i (q_i ⊙ e^{G_i}) do_iᵀ            (for the previous chunk)
// The intra-chunk sums use the forward's sub-blocks; for dk an off-diagonal block (keys in sub-chunk J,
// queries after it) takes its reference point at the LAST row of J, so again both factors decay.
// The gate gradient needs no exponentials of its own (fla's chunk_gla_bwd_kernel_inter, here with the end
// state): by the recurrent backward, dg_t = Σ_{s >= t} (q_s ⊙ dq_s − k_s ⊙ dk_s) over the whole sequence, and
// the part of that sum after the chunk equals rowsum(S_end ⊙ dS) (S_end is the next chunk's saved start
// state; zero for the last chunk). So
//   dg_i = Σ_{s >= i in chunk} (q_s ⊙ dq_s − k_s ⊙ dk_s) + rowsum(S_end ⊙ dS)
//
// The GEMMs are mostly 'N','N' or 'T','N' (oneDNN's 'N','T' is markedly slower on these small shapes), and
// the forward's paired products share one call: o = scale · [Qg | A] [S0; v]. Two exceptions, each measured
// faster than the copy it replaces: dA = (scale · do) vᵀ is one 'N','T' call reading v in place (a scalar
// transpose of v cost more, v being read from memory there for the first time), and dv = Kd dS + Aᵀ (scale · do)
// is two calls, the second 'T','N' on A, instead of one on a transposed copy of A.
//
// Gates must be finite and <= 0 (log forget gates). Parallel over (batch x heads); every (b, h) is independent, so all
// outputs are the same bits for any thread count.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/blas.h"
#include "engine/error.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace gla_detail {

// Rows per sub-chunk of the intra-chunk scores (fla's BC). Any value is exact and stable (the diagonal blocks
// use products of per-step decays); 32 measured about the same as 16 at chunk 64 and 64 slower.
constexpr int kSub = 16;

// Channels per block of the backward's gate-gradient running sums (two AVX-512 registers of doubles).
constexpr int kDg = 16;

// e^x for the decay exponents (x <= 0). Below −80 the factor is < 2e−35, far under the float resolution of
// any sum it enters, and an exact 0 keeps subnormals out of the products and GEMMs. Written as a select after
// the exponential so the loops calling it still vectorise.
inline float decay_exp(float x) {
  const float e = vec_exp(x);
  return x < -80.0f ? 0.0f : e;
}
inline double decay_exp(double x) { return std::exp(x); }

inline int num_chunks(int Tn, int chunk) { return (Tn + chunk - 1) / chunk; }

// One thread's working set for chunks of up to C rows. QA has rows of ld = K + C.
template <class T>
struct Work {
  int C, K, V, ld;
  std::vector<T> G, alpha, E, EL;  // (C, K): cumulative gates G, per-step decays e^{g}, e^{G}, e^{G_L − G}
  std::vector<T> QA;               // (C, K + C): [Qg | A], Qg = q ⊙ e^{G}, A the intra-chunk scores
  std::vector<T> Kd;               // (C, K): k ⊙ e^{G_L − G}
  std::vector<T> SV;               // (K + C, V): forward [S; v_c]; backward [dS; scale · do_c]
  std::vector<T> dA;               // (C, C)
  std::vector<T> ST;               // (V, K): S0ᵀ or dSᵀ
  std::vector<T> Eq, Qn, Kn, KnT;  // (C, K) each (KnT as (K, C)): factors of the off-diagonal score blocks
  std::vector<T> dq, dk, tmp;      // (C, K)
  std::vector<T> kT, WT;           // (K, kSub): a diagonal block's keys, transposed, and decays to one query
  std::vector<double> acc;         // (K)
  Work(int C_, int K_, int V_)
      : C(C_),
        K(K_),
        V(V_),
        ld(K_ + C_),
        G((size_t)C * K),
        alpha(G.size()),
        E(G.size()),
        EL(G.size()),
        QA((size_t)C * ld),
        Kd(G.size()),
        SV((size_t)ld * V),
        dA((size_t)C * C),
        ST((size_t)V * K),
        Eq(G.size()),
        Qn(G.size()),
        Kn(G.size()),
        KnT(G.size()),
        dq(G.size()),
        dk(G.size()),
        tmp(G.size()),
        kT((size_t)K * kSub),
        WT(kT.size()),
        acc(K) {}
};

// Gates of one chunk of L rows (g, q, k: rows of stride ldk), and the inter-chunk factors Qg, Kd.
// G_i = Σ_{s <= i} g_s is summed in double and rounded once: the exponents below are differences of G, and a
// float running sum would drift by many ulps of |G| over a long chunk of strong decay. Rounding is monotone, so
// the float G still never increases down the chunk and every difference taken below keeps its sign.
template <class T>
void chunk_gates(Work<T>& w, const T* g, const T* q, const T* k, int ldk, int L) {
  const int K = w.K;
  std::fill(w.acc.begin(), w.acc.end(), 0.0);
  for (int i = 0; i < L; i++) {
    const T* gi = g + (size_t)i * ldk;
    T *Gi = w.G.data() + (size_t)i * K, *al = w.alpha.data() + (size_t)i * K;
#pragma omp simd
    for (int a = 0; a < K; a++) {
      w.acc[a] += double(gi[a]);
      Gi[a] = T(w.acc[a]);
      al[a] = decay_exp(gi[a]);
    }
  }
  const T* GL = w.G.data() + (size_t)(L - 1) * K;
  for (int i = 0; i < L; i++) {
    const T* Gi = w.G.data() + (size_t)i * K;
    const T *qi = q + (size_t)i * ldk, *ki = k + (size_t)i * ldk;
    T *E = w.E.data() + (size_t)i * K, *EL = w.EL.data() + (size_t)i * K;
    T *Qg = w.QA.data() + (size_t)i * w.ld, *Kd = w.Kd.data() + (size_t)i * K;
#pragma omp simd
    for (int a = 0; a < K; a++) {
      E[a] = decay_exp(Gi[a]);
      EL[a] = decay_exp(GL[a] - Gi[a]);
      Qg[a] = qi[a] * E[a];
      Kd[a] = ki[a] * EL[a];
    }
  }
}

// One diagonal sub-block [I0, I1) of the scores, elementwise: A_ij = Σ_a q_ia k_ja e^{G_ia − G_ja}, j <= i
// (A: rows of stride lda). fla exponentiates G_i − G_j per element; here the same factor is a product of
// per-step decays, e^{G_i − G_j} = Π_{j < m <= i} e^{g_m}, each <= 1: no exponential of a positive number,
// and one multiply per element instead of an exponential. The block's keys are transposed into a (K, kSub)
// tile, and WT[a][j] holds e^{G_ia − G_ja} for the current query row i, so the innermost loop runs over kSub
// keys with a fixed trip count; lanes j > i hold 0.
template <class T>
void diag_scores(Work<T>& w, T* A, int lda, const T* q, const T* k, int ldk, int I0, int I1) {
  const int K = w.K, n = I1 - I0;
  T *kT = w.kT.data(), *WT = w.WT.data();
  for (int a = 0; a < K; a++)
    for (int j = 0; j < kSub; j++) {
      kT[a * kSub + j] = j < n ? k[(size_t)(I0 + j) * ldk + a] : T(0);
      WT[a * kSub + j] = T(0);
    }
  for (int i = I0; i < I1; i++) {
    const int li = i - I0;
    const T* qi = q + (size_t)i * ldk;
    const T* al = w.alpha.data() + (size_t)i * K;
    // four partial sums over the channels, so consecutive channels do not wait on each other's adds
    T acc[4][kSub] = {};
    auto channel = [&](int a, T* acc_p) {
      const T qa = qi[a], aa = al[a];
      const T* kr = kT + a * kSub;
      T* wr = WT + a * kSub;
#pragma omp simd
      for (int j = 0; j < kSub; j++) {
        const T x = j == li ? T(1) : wr[j] * aa;  // e^{G_i − G_j} = e^{G_{i−1} − G_j} e^{g_i}
        wr[j] = x;
        acc_p[j] += qa * kr[j] * x;
      }
    };
    int a = 0;
    for (; a + 4 <= K; a += 4) {
      channel(a, acc[0]);
      channel(a + 1, acc[1]);
      channel(a + 2, acc[2]);
      channel(a + 3, acc[3]);
    }
    for (; a < K; a++) channel(a, acc[0]);
    for (int j = I0; j <= i; j++) {
      const int l = j - I0;
      A[(size_t)i * lda + j] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    }
  }
}

// Gradient of one diagonal sub-block [I0, I1): dq_i += Σ_{j<=i} dA_ij k_j ⊙ e^{G_i − G_j} and
// dk_j += Σ_{i>=j} dA_ij q_i ⊙ e^{G_i − G_j}, with the decay built from per-step decays as in diag_scores
// while j walks down from i. Channels go in groups of W held in local arrays (registers), since dq_i and the
// decay are updated for every key; 32-wide groups keep two independent vector chains in flight.
template <int W, class T>
void diag_grads_w(Work<T>& w, const T* q, const T* k, int ldk, int I0, int I1) {
  const int K = w.K;
  for (int i = I0; i < I1; i++) {
    const T* qi = q + (size_t)i * ldk;
    const T* dAi = w.dA.data() + (size_t)i * w.C;
    for (int a0 = 0; a0 < K; a0 += W) {
      const int nb = std::min(W, K - a0);
      T dqa[W] = {}, dec[W], qa[W] = {};
      for (int l = 0; l < W; l++) dec[l] = T(1);
      for (int l = 0; l < nb; l++) qa[l] = qi[a0 + l];
      for (int j = i; j >= I0; j--) {
        const T d = dAi[j];
        const T* kj = k + (size_t)j * ldk + a0;
        const T* aj = w.alpha.data() + (size_t)j * K + a0;
        T* dkj = w.dk.data() + (size_t)j * K + a0;
        if (nb == W) {
#pragma omp simd
          for (int l = 0; l < W; l++) {
            const T wd = d * dec[l];
            dqa[l] += wd * kj[l];
            dkj[l] += wd * qa[l];
            dec[l] *= aj[l];  // e^{G_i − G_{j−1}} for the next key
          }
        } else {
          for (int l = 0; l < nb; l++) {
            const T wd = d * dec[l];
            dqa[l] += wd * kj[l];
            dkj[l] += wd * qa[l];
            dec[l] *= aj[l];
          }
        }
      }
      T* dqi = w.dq.data() + (size_t)i * K + a0;
      for (int l = 0; l < nb; l++) dqi[l] += dqa[l];
    }
  }
}
template <class T>
void diag_grads(Work<T>& w, const T* q, const T* k, int ldk, int I0, int I1) {
  if (w.K % 32 == 0)
    diag_grads_w<32>(w, q, k, ldk, I0, I1);
  else
    diag_grads_w<16>(w, q, k, ldk, I0, I1);
}

// Intra-chunk scores A (L, L), rows of stride lda, zero above the diagonal. With with_dq (backward), also adds
// the off-diagonal part of dq_i = Σ_{j < I0} dA_ij k_j ⊙ e^{G_i − G_j} to w.dq, reusing each sub-chunk's
// factors e^{G_i − G_j} = e^{G_i − gn} e^{gn − G_j}, gn = G_{I0}.
template <class T>
void chunk_scores(Work<T>& w, T* A, int lda, const T* q, const T* k, int ldk, int L, bool with_dq) {
  const int K = w.K;
  for (int i = 0; i < L; i++) std::fill(A + (size_t)i * lda, A + (size_t)i * lda + L, T(0));
  for (int I0 = 0; I0 < L; I0 += kSub) {
    const int I1 = std::min(I0 + kSub, L), n = I1 - I0;
    if (I0 > 0) {
      const T* gn = w.G.data() + (size_t)I0 * K;
      // query factors, rows [I0, I1): Eq_i = e^{G_i − gn}, Qn_i = q_i ⊙ Eq_i
      for (int i = I0; i < I1; i++) {
        const T* Gi = w.G.data() + (size_t)i * K;
        const T* qi = q + (size_t)i * ldk;
        T *Eq = w.Eq.data() + (size_t)i * K, *Qn = w.Qn.data() + (size_t)i * K;
#pragma omp simd
        for (int a = 0; a < K; a++) {
          Eq[a] = decay_exp(Gi[a] - gn[a]);
          Qn[a] = qi[a] * Eq[a];
        }
      }
      // key factors, rows [0, I0): Kn_j = k_j ⊙ e^{gn − G_j}, also transposed (K, I0) for the 'N','N' GEMM
      for (int j = 0; j < I0; j++) {
        const T* Gj = w.G.data() + (size_t)j * K;
        const T* kj = k + (size_t)j * ldk;
        T* Kn = w.Kn.data() + (size_t)j * K;
#pragma omp simd
        for (int a = 0; a < K; a++) Kn[a] = kj[a] * decay_exp(gn[a] - Gj[a]);
        for (int a = 0; a < K; a++) w.KnT[(size_t)a * I0 + j] = Kn[a];
      }
      // A[I0:I1, 0:I0] = Qn Knᵀ
      gemm(false, false, n, I0, K, T(1), w.Qn.data() + (size_t)I0 * K, K, w.KnT.data(), I0, T(0), A + (size_t)I0 * lda,
           lda);
      if (with_dq) {
        // dq[I0:I1] += Eq ⊙ (dA[I0:I1, 0:I0] Kn)
        gemm(false, false, n, K, I0, T(1), w.dA.data() + (size_t)I0 * w.C, w.C, w.Kn.data(), K, T(0), w.tmp.data(), K);
        for (int i = I0; i < I1; i++) {
          const T *Eq = w.Eq.data() + (size_t)i * K, *t = w.tmp.data() + (size_t)(i - I0) * K;
          T* dq = w.dq.data() + (size_t)i * K;
#pragma omp simd
          for (int a = 0; a < K; a++) dq[a] += Eq[a] * t[a];
        }
      }
    }
    diag_scores(w, A, lda, q, k, ldk, I0, I1);
  }
}

// Prefetches rows [0, rows) of n values (row stride ld), so the next chunk's inputs are on their way while this
// one computes: one head's rows are short (K or V values) and strided by H·K (a few percent at B 64, H 4,
// K = V = 32, T 256).
template <class T>
void prefetch_rows(const T* p, int rows, int ld, int n) {
  constexpr int step = 64 / sizeof(T);  // one cache line
  for (int i = 0; i < rows; i++)
    for (int x = 0; x < n; x += step) __builtin_prefetch(p + (size_t)i * ld + x);
}

// dst (cols, rows) = srcᵀ, src (rows, cols) with row stride lds, dst with row stride ldd
template <class T>
void transpose(T* dst, int ldd, const T* src, int lds, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}

}  // namespace gla_detail

// o: (B, T, H, V) written; states: gla_states_size(...) elements written, (B, H, nchunks, K, V);
// q, k, g: (B, T, H, K); v: (B, T, H, V); chunk >= 1 (T need not be a multiple of it)
template <class T>
void gla_forward_chunked(T* o, T* states, const T* q, const T* k, const T* v, const T* g, int Bn, int Tn, int H, int K,
                         int V, T scale, int chunk) {
  CANONLAB_CHECK(chunk >= 1, "gla: chunk size must be at least 1");
  if (Tn <= 0) return;
  const int nc = gla_detail::num_chunks(Tn, chunk), C = std::min(chunk, Tn);
  const int ldk = H * K, ldv = H * V;
  // requests the inputs of chunk c of pair bh ahead of use
  auto prefetch = [&](int bh, int c) {
    const int b = bh / H, h = bh % H, L = std::min(chunk, Tn - c * chunk);
    const size_t rk = ((size_t)b * Tn + c * chunk) * H * K + (size_t)h * K;
    const size_t rv = ((size_t)b * Tn + c * chunk) * H * V + (size_t)h * V;
    gla_detail::prefetch_rows(q + rk, L, ldk, K);
    gla_detail::prefetch_rows(k + rk, L, ldk, K);
    gla_detail::prefetch_rows(g + rk, L, ldk, K);
    gla_detail::prefetch_rows(v + rv, L, ldv, V);
  };
#pragma omp parallel
  {
    gla_detail::Work<T> w(C, K, V);
    T* S = w.SV.data();  // (K, V): the running state, rows [0, K) of SV
#pragma omp for schedule(static)
    for (int bh = 0; bh < Bn * H; bh++) {
      const int b = bh / H, h = bh % H;
      std::fill(S, S + (size_t)K * V, T(0));
      for (int c = 0; c < nc; c++) {
        const int t0 = c * chunk, L = std::min(chunk, Tn - t0);
        const size_t rk = ((size_t)b * Tn + t0) * H * K + (size_t)h * K;  // row t0 of this head in q, k, g
        const size_t rv = ((size_t)b * Tn + t0) * H * V + (size_t)h * V;  // row t0 of this head in v, o
        const T *qc = q + rk, *kc = k + rk, *gc = g + rk, *vc = v + rv;
        // the next chunk of this (b, h), or the first chunk of the next pair
        if (c + 1 < nc)
          prefetch(bh, c + 1);
        else if (bh + 1 < Bn * H)
          prefetch(bh + 1, 0);
        std::copy(S, S + (size_t)K * V, states + ((size_t)bh * nc + c) * K * V);
        for (int i = 0; i < L; i++) std::copy(vc + (size_t)i * ldv, vc + (size_t)i * ldv + V, S + (size_t)(K + i) * V);
        gla_detail::chunk_gates(w, gc, qc, kc, ldk, L);
        gla_detail::chunk_scores(w, w.QA.data() + K, w.ld, qc, kc, ldk, L, false);
        // o = scale · [Qg | A] [S; v]
        gemm(false, false, L, V, K + L, scale, w.QA.data(), w.ld, w.SV.data(), V, T(0), o + rv, ldv);
        if (c + 1 < nc) {
          // S = diag(e^{G_L}) S + Kdᵀ v
          const T* eGL = w.E.data() + (size_t)(L - 1) * K;
          for (int a = 0; a < K; a++)
#pragma omp simd
            for (int e = 0; e < V; e++) S[(size_t)a * V + e] *= eGL[a];
          gemm(true, false, K, V, L, T(1), w.Kd.data(), K, S + (size_t)K * V, V, T(1), S, V);
        }
      }
    }
  }
}

// dq, dk, dg: (B, T, H, K) written; dv: (B, T, H, V) written; dout: (B, T, H, V);
// states: from gla_forward_chunked with the same chunk; other inputs as in forward.
template <class T>
void gla_backward_chunked(T* dq, T* dk, T* dv, T* dg, const T* dout, const T* states, const T* q, const T* k,
                          const T* v, const T* g, int Bn, int Tn, int H, int K, int V, T scale, int chunk) {
  using gla_detail::decay_exp;
  using gla_detail::kSub;
  CANONLAB_CHECK(chunk >= 1, "gla: chunk size must be at least 1");
  if (Tn <= 0) return;
  const int nc = gla_detail::num_chunks(Tn, chunk), C = std::min(chunk, Tn);
  const int ldk = H * K, ldv = H * V;
  // requests the inputs of chunk c of pair bh ahead of use
  auto prefetch = [&](int bh, int c) {
    const int b = bh / H, h = bh % H, L = std::min(chunk, Tn - c * chunk);
    const size_t rk = ((size_t)b * Tn + c * chunk) * H * K + (size_t)h * K;
    const size_t rv = ((size_t)b * Tn + c * chunk) * H * V + (size_t)h * V;
    gla_detail::prefetch_rows(q + rk, L, ldk, K);
    gla_detail::prefetch_rows(k + rk, L, ldk, K);
    gla_detail::prefetch_rows(g + rk, L, ldk, K);
    gla_detail::prefetch_rows(v + rv, L, ldv, V);
    gla_detail::prefetch_rows(dout + rv, L, ldv, V);
    gla_detail::prefetch_rows(states + ((size_t)bh * nc + c) * K * V, 1, 0, K * V);
  };
#pragma omp parallel
  {
    gla_detail::Work<T> w(C, K, V);
    const int ld = w.ld;
    T* dS = w.SV.data();                   // (K, V): rows [0, K) of SV
    T* sdo = w.SV.data() + (size_t)K * V;  // (L, V): scale · do_c, rows [K, K + L) of SV
    T* A = w.QA.data() + K;                // (L, L), rows of stride ld
#pragma omp for schedule(static)
    for (int bh = 0; bh < Bn * H; bh++) {
      const int b = bh / H, h = bh % H;
      std::fill(dS, dS + (size_t)K * V, T(0));
      for (int c = nc - 1; c >= 0; c--) {
        const int t0 = c * chunk, L = std::min(chunk, Tn - t0);
        const bool last = c + 1 == nc;  // no later tokens: dS is zero
        const size_t rk = ((size_t)b * Tn + t0) * H * K + (size_t)h * K;
        const size_t rv = ((size_t)b * Tn + t0) * H * V + (size_t)h * V;
        const T *qc = q + rk, *kc = k + rk, *gc = g + rk, *vc = v + rv, *doc = dout + rv;
        const T* S0 = states + ((size_t)bh * nc + c) * K * V;                         // (K, V) at the chunk start
        const T* Send = last ? nullptr : states + ((size_t)bh * nc + c + 1) * K * V;  // (K, V) at the chunk end
        // the previous chunk of this (b, h), or the last chunk of the next pair
        if (c > 0)
          prefetch(bh, c - 1);
        else if (bh + 1 < Bn * H)
          prefetch(bh + 1, nc - 1);
        for (int i = 0; i < L; i++)
#pragma omp simd
          for (int e = 0; e < V; e++) sdo[(size_t)i * V + e] = scale * doc[(size_t)i * ldv + e];
        gla_detail::chunk_gates(w, gc, qc, kc, ldk, L);
        std::fill(w.dq.begin(), w.dq.begin() + (size_t)L * K, T(0));
        std::fill(w.dk.begin(), w.dk.begin() + (size_t)L * K, T(0));

        // dA = (scale · do) vᵀ (only j <= i is read)
        gemm(false, true, L, L, V, T(1), sdo, V, vc, ldv, T(0), w.dA.data(), C);
        // A, and the off-diagonal blocks of dq
        gla_detail::chunk_scores(w, A, ld, qc, kc, ldk, L, true);
        // off-diagonal blocks of dk: keys in sub-chunk [J0, J1), queries i >= J1, reference r = G_{J1−1}:
        //   dk_j += e^{r − G_j} ⊙ Σ_i dA_ij (q_i ⊙ e^{G_i − r})
        for (int J0 = 0; J0 + kSub < L; J0 += kSub) {
          const int J1 = J0 + kSub, m = L - J1;
          const T* r = w.G.data() + (size_t)(J1 - 1) * K;
          for (int i = J1; i < L; i++) {
            const T* Gi = w.G.data() + (size_t)i * K;
            const T* qi = qc + (size_t)i * ldk;
            T* Qm = w.Qn.data() + (size_t)(i - J1) * K;
#pragma omp simd
            for (int a = 0; a < K; a++) Qm[a] = qi[a] * decay_exp(Gi[a] - r[a]);
          }
          gemm(true, false, kSub, K, m, T(1), w.dA.data() + (size_t)J1 * C + J0, C, w.Qn.data(), K, T(0), w.tmp.data(),
               K);
          for (int j = J0; j < J1; j++) {
            const T* Gj = w.G.data() + (size_t)j * K;
            const T* t = w.tmp.data() + (size_t)(j - J0) * K;
            T* dkj = w.dk.data() + (size_t)j * K;
#pragma omp simd
            for (int a = 0; a < K; a++) dkj[a] += decay_exp(r[a] - Gj[a]) * t[a];
          }
        }
        // diagonal blocks of dq and dk
        for (int I0 = 0; I0 < L; I0 += kSub) gla_detail::diag_grads(w, qc, kc, ldk, I0, std::min(I0 + kSub, L));
        // inter-chunk terms: dq += e^{G} ⊙ ((scale · do) S0ᵀ); dk += e^{G_L − G} ⊙ (v dSᵀ)
        gla_detail::transpose(w.ST.data(), K, S0, V, K, V);
        gemm(false, false, L, K, V, T(1), sdo, V, w.ST.data(), K, T(0), w.tmp.data(), K);
#pragma omp simd
        for (size_t x = 0; x < (size_t)L * K; x++) w.dq[x] += w.E[x] * w.tmp[x];
        if (!last) {
          gla_detail::transpose(w.ST.data(), K, dS, V, K, V);
          gemm(false, false, L, K, V, T(1), vc, ldv, w.ST.data(), K, T(0), w.tmp.data(), K);
#pragma omp simd
          for (size_t x = 0; x < (size_t)L * K; x++) w.dk[x] += w.EL[x] * w.tmp[x];
        }
        // dv = Kd dS + Aᵀ (scale · do)  (the dS term only when there are later tokens); Aᵀ is read through a
        // 'T','N' product rather than transposed out, which cost a strided (L, L) copy per chunk
        if (!last) gemm(false, false, L, V, K, T(1), w.Kd.data(), K, dS, V, T(0), dv + rv, ldv);
        gemm(true, false, L, V, L, T(1), A, ld, sdo, V, last ? T(0) : T(1), dv + rv, ldv);
        // dg = reverse cumsum of q ⊙ dq − k ⊙ dk within the chunk, plus rowsum(S_end ⊙ dS) for the later tokens
        // Channels go in blocks of kDg whose running sums stay in a local array (registers): with the sums in
        // w.acc every row's add waited on the previous row's store.
        for (int a0 = 0; a0 < K; a0 += gla_detail::kDg) {
          const int nb = std::min(gla_detail::kDg, K - a0);
          double acc[gla_detail::kDg] = {};
          if (!last)
            for (int l = 0; l < nb; l++) {
              const size_t row = (size_t)(a0 + l) * V;
              acc[l] = double(vec_dot(Send + row, dS + row, V));
            }
          for (int i = L - 1; i >= 0; i--) {
            const size_t ro = rk + (size_t)i * ldk + a0;  // row i, channel a0 of this head in q, k, dq, dk, dg
            const T *qi = q + ro, *ki = k + ro;
            const T *dqi = w.dq.data() + (size_t)i * K + a0, *dki = w.dk.data() + (size_t)i * K + a0;
            if (nb == gla_detail::kDg) {
#pragma omp simd
              for (int l = 0; l < gla_detail::kDg; l++) {
                acc[l] += double(qi[l] * dqi[l] - ki[l] * dki[l]);
                dg[ro + l] = T(acc[l]);
                dq[ro + l] = dqi[l];
                dk[ro + l] = dki[l];
              }
            } else {
              for (int l = 0; l < nb; l++) {
                acc[l] += double(qi[l] * dqi[l] - ki[l] * dki[l]);
                dg[ro + l] = T(acc[l]);
                dq[ro + l] = dqi[l];
                dk[ro + l] = dki[l];
              }
            }
          }
        }
        // dS for the previous chunk: diag(e^{G_L}) dS + Qgᵀ (scale · do)
        if (c > 0) {
          const T* eGL = w.E.data() + (size_t)(L - 1) * K;
          for (int a = 0; a < K; a++)
#pragma omp simd
            for (int e = 0; e < V; e++) dS[(size_t)a * V + e] *= eGL[a];
          gemm(true, false, K, V, L, T(1), w.QA.data(), ld, sdo, V, T(1), dS, V);
        }
      }
    }
  }
}

}  // namespace canonlab
