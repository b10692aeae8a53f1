#pragma once
// (Gated) delta rule, chunked for training: the same op as naive.h (see there for the recurrence), threaded
// over (batch, head) pairs with single-threaded GEMMs inside each pair.
//
// Forward: the WY form (../shared/reference/linear-mixers.md §3.3). For a chunk of n tokens with γ the
// chunk-local cumulative log decay (γ_i = g_{t0} + … + g_{t0+i}, non-increasing) and S_prev the state at the
// chunk start:
//   D_ij  = exp(γ_i − γ_j) for j <= i                          (exponent <= 0: never overflows)
//   A_ij  = β_i (k_i · k_j) D_ij for i > j, else 0
//   Tm    = (I + A)^{−1}
//   w     = Tm diag(β ⊙ exp(γ)) K,   u = Tm diag(β) V
//   v_new = u − w S_prev  = Tm diag(β) (V − diag(exp(γ)) K S_prev)   the per-token u = β(v − S'ᵀk) of the recurrence
//   O     = scale [ diag(exp(γ)) Q S_prev + (Q Kᵀ ⊙ D ⊙ M) v_new ]    M: causal mask including the diagonal
//   S     = exp(γ_last) S_prev + (diag(exp(γ_last − γ)) K)ᵀ v_new
// Every factor exponentiates a non-positive number (γ_i, γ_i − γ_j with j <= i, γ_last − γ_i), so a gate that
// decays by −30 per step (or −200 within a chunk) only underflows to zero, never overflows.
// Tm is applied by forward substitution on the right-hand side rather than formed: v_new is one triangular solve
// of width V after one GEMM K S_prev, instead of n³/6 for Tm and a GEMM of width K + V for [w | u]. The solve is
// blocked: 16-row diagonal blocks by substitution, the updates from earlier blocks as GEMMs.
//
// Backward: states are checkpointed at chunk starts by the forward (`states`); inside each chunk the backward
// recomputes the per-token states from its checkpoint into a (n, K, V) scratch and runs the recurrent backward
// of naive.h over the chunk, carrying dS from chunk to chunk in reverse. For the head sizes this engine trains
// that is fewer multiply-adds than differentiating the WY form in matrix form: about 10 K V per token, against
// roughly 9 C K + 7 K V for chunk C (K = V; 26k against 10k at K = V = 32, C = 64), and the per-token work
// stays in L1/L2. The row sums the recurrent backward needs per token (dk_t, dq_t) are kept as vector-lane
// partial sums and reduced for all rows together, since a horizontal sum per row would cost as much as the row.
//
// Speed: bench/bench_mixers (BENCHMARKS.md, "Linear-time mixers"); at B = 64, H = 4, K = V = 32, T = 256,
// chunk 64 on 2 threads, forward + backward take about 35-40 ms, the naive pair about 300 ms on one thread.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "engine/blas.h"
#include "engine/error.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace delta_rule_detail {

inline int num_chunks(int Tn, int chunk) { return (Tn + chunk - 1) / chunk; }

constexpr int kLanes = 16;  // vector lanes of the backward's inner loops: one AVX-512 register of floats

inline int round_up_lanes(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Σ acc[l] in a fixed tree order
template <class T>
inline T lane_sum(const T (&acc)[kLanes]) {
  T a[8];
  for (int l = 0; l < 8; l++) a[l] = acc[l] + acc[l + 8];
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

// Σ x[i]·y[i] for n a multiple of kLanes, partial sums combined in a fixed order
template <class T>
inline T lane_dot(const T* x, const T* y, int n) {
  T acc[kLanes] = {};
  for (int i = 0; i < n; i += kLanes)
    for (int l = 0; l < kLanes; l++) acc[l] += x[i + l] * y[i + l];
  return lane_sum(acc);
}

// out = Mᵀ x, out[j] = Σ_r M[r][j] x[r]; M: (K, Vp), x: (K), out: (Vp), Vp a multiple of kLanes. Lanes along
// Vp outermost so the partial sums stay in registers across the rows (even and odd rows apart, to halve the
// dependency chain).
template <class T>
inline void mat_t_vec(T* out, const T* M, const T* x, int K, int Vp) {
  constexpr int L = kLanes;
  for (int j = 0; j < Vp; j += L) {
    T acc0[L] = {}, acc1[L] = {};
    int r = 0;
    for (; r + 2 <= K; r += 2) {
      const T* m0 = M + (size_t)r * Vp + j;
      const T* m1 = m0 + Vp;
      for (int l = 0; l < L; l++) {
        acc0[l] += m0[l] * x[r];
        acc1[l] += m1[l] * x[r + 1];
      }
    }
    for (; r < K; r++)
      for (int l = 0; l < L; l++) acc0[l] += M[(size_t)r * Vp + j + l] * x[r];
    for (int l = 0; l < L; l++) out[j + l] = acc0[l] + acc1[l];
  }
}

// One token of the backward's recomputation: S1 = a S0 + k uᵀ, and pred = S1ᵀ kn for the next token in the same
// sweep. S0, S1: (K, Vp); u, pred: (Vp); k, kn: (K). Lanes along Vp outermost keep pred's partial sums in
// registers over the rows (even and odd rows apart); restrict-qualified arguments spare the run-time alias checks
// (and the scalar fallback that would keep the partial sums in memory).
template <int VPc, int KC, class T>
inline void recompute_step(T* __restrict S1, T* __restrict pred, const T* __restrict S0, const T* __restrict u,
                           const T* __restrict kt, const T* __restrict kn, T a, int Krt, int Vprt) {
  constexpr int L = kLanes;
  const int Vp = VPc > 0 ? VPc : Vprt, K = KC > 0 ? KC : Krt;
  for (int j = 0; j < Vp; j += L) {
    T p0[L] = {}, p1[L] = {};
    int r = 0;
    for (; r + 2 <= K; r += 2) {
      const T k0 = kt[r], k1 = kt[r + 1], n0 = kn[r], n1 = kn[r + 1];
      const T* s0 = S0 + (size_t)r * Vp + j;
      T* s1 = S1 + (size_t)r * Vp + j;
      for (int l = 0; l < L; l++) {
        const T x0 = a * s0[l] + k0 * u[j + l];
        const T x1 = a * s0[l + Vp] + k1 * u[j + l];
        s1[l] = x0;
        s1[l + Vp] = x1;
        p0[l] += x0 * n0;
        p1[l] += x1 * n1;
      }
    }
    if (r < K) {
      const T k0 = kt[r], n0 = kn[r];
      const T* s0 = S0 + (size_t)r * Vp + j;
      T* s1 = S1 + (size_t)r * Vp + j;
      for (int l = 0; l < L; l++) {
        const T x0 = a * s0[l] + k0 * u[j + l];
        s1[l] = x0;
        p0[l] += x0 * n0;
      }
    }
    for (int l = 0; l < L; l++) pred[j + l] = p0[l] + p1[l];
  }
}

// One row r of the backward's sweep over dS (see delta_rule_backward_chunked), lanes [0, Vp):
//   d = ds + k_r dpred;  pk = Σ_lanes ds ⊙ u + s ⊙ a·dpred;  pq = Σ_lanes s ⊙ do;  gacc += s ⊙ d
//   ds <- a d + scale q'_r do';  dun += ds k'_r            (the last line is pass 1 of the previous token)
// s: the row of S_{t−1}; pk, pq: kLanes partial sums written. Separate restrict-qualified arguments let the
// compiler vectorise without run-time alias checks.
template <int VPc, class T>
inline void backward_sweep_row(T* __restrict pk, T* __restrict pq, T* __restrict gacc, T* __restrict ds,
                               T* __restrict dun, const T* __restrict s, const T* __restrict u,
                               const T* __restrict dpred, const T* __restrict adpred, const T* __restrict dot,
                               const T* __restrict dop, T kr, T sq, T kpr, T a, int Vprt) {
  constexpr int L = kLanes;
  const int Vp = VPc > 0 ? VPc : Vprt;
  T ka[L] = {}, qa[L] = {};
  for (int j = 0; j < Vp; j += L)
    for (int l = 0; l < L; l++) {
      const T sv = s[j + l], dsv = ds[j + l];
      const T d = dsv + kr * dpred[j + l];
      ka[l] += dsv * u[j + l] + sv * adpred[j + l];
      qa[l] += sv * dot[j + l];
      gacc[l] += sv * d;
      const T dn = a * d + sq * dop[j + l];
      ds[j + l] = dn;
      dun[j + l] += dn * kpr;
    }
  for (int l = 0; l < L; l++) {
    pk[l] = ka[l];
    pq[l] = qa[l];
  }
}

// out[r] = Σ_{l<16} P[r][l] for r < R; P: (R, 16); tmp: 14R elements. A pairwise tree over all rows at once:
// the pair loads vectorise (as permutes), where a horizontal sum per row would be a chain of scalar adds.
template <class T>
inline void row_sums16(T* __restrict out, const T* __restrict P, T* __restrict tmp, int R) {
  T* __restrict P8 = tmp;
  T* __restrict P4 = tmp + 8 * R;
  T* __restrict P2 = tmp + 12 * R;
  for (int i = 0; i < 8 * R; i++) P8[i] = P[2 * i] + P[2 * i + 1];
  for (int i = 0; i < 4 * R; i++) P4[i] = P8[2 * i] + P8[2 * i + 1];
  for (int i = 0; i < 2 * R; i++) P2[i] = P4[2 * i] + P4[2 * i + 1];
  for (int i = 0; i < R; i++) out[i] = P2[2 * i] + P2[2 * i + 1];
}

}  // namespace delta_rule_detail

// o: (B, T, H, V) written; states: delta_rule_states_size(...) elements written, laid out (B, H, chunks, K, V);
// q, k: (B, T, H, K); v: (B, T, H, V); beta: (B, T, H); g: (B, T, H) log decay (<= 0) or nullptr (DeltaNet)
template <class T>
void delta_rule_forward_chunked(T* o, T* states, const T* q, const T* k, const T* v, const T* beta, const T* g, int Bn,
                                int Tn, int H, int K, int V, T scale, int chunk) {
  CANONLAB_CHECK(chunk >= 1, "delta_rule: chunk size must be at least 1");
  constexpr int L = delta_rule_detail::kLanes;
  const int nch = delta_rule_detail::num_chunks(Tn, chunk);
  const int C = std::min(chunk, std::max(Tn, 1));  // no chunk is longer than the sequence
  const int ldk = H * K, ldv = H * V;
  const size_t KV = (size_t)K * V;
#pragma omp parallel
  {
    // per-thread scratch: X (2C, K) = [K; Q] rows of the chunk; GP (2C, C) = X Kᵀ = [K Kᵀ; Q Kᵀ], turned in
    // place into L (top) and the masked, decayed scale·Q Kᵀ (bottom); Y (2C, V) = X S_prev; U (C, V) = v_new;
    // Kd (C, K) = exp(γ_last − γ) ⊙ K; S (K, V) the running state
    std::vector<T> gam(C), D((size_t)C * C), X((size_t)2 * C * K), GP((size_t)2 * C * C), Y((size_t)2 * C * V);
    std::vector<T> U((size_t)C * V), Kd((size_t)C * K), S(KV);
#pragma omp for schedule(static)
    for (int bh = 0; bh < Bn * H; bh++) {
      const int b = bh / H, h = bh % H;
      // (T, K) / (T, V) row views of this (b, h), rows of stride ldk / ldv; gates of stride H
      const T* Qb = q + (size_t)b * Tn * ldk + (size_t)h * K;
      const T* Kb = k + (size_t)b * Tn * ldk + (size_t)h * K;
      const T* Vb = v + (size_t)b * Tn * ldv + (size_t)h * V;
      T* Ob = o + (size_t)b * Tn * ldv + (size_t)h * V;
      const T* betab = beta + (size_t)b * Tn * H + h;
      const T* gb = g ? g + (size_t)b * Tn * H + h : nullptr;
      T* Sb = states + (size_t)bh * nch * KV;  // (chunks, K, V)
      std::fill(S.begin(), S.end(), T(0));
      for (int c = 0; c < nch; c++) {
        const int t0 = c * chunk, n = std::min(chunk, Tn - t0);
        std::copy(S.begin(), S.end(), Sb + (size_t)c * KV);
        // γ: chunk-local cumulative log decay
        T acc = 0;
        for (int i = 0; i < n; i++) {
          if (gb) acc += gb[(size_t)(t0 + i) * H];
          gam[i] = acc;
        }
        // D (n, n), lower triangle incl. diagonal: exp(γ_i − γ_j) <= 1
        for (int i = 0; i < n; i++) {
          T* d = &D[(size_t)i * C];
          if (gb)
            for (int j = 0; j <= i; j++) d[j] = vec_exp(gam[i] - gam[j]);
          else
            for (int j = 0; j <= i; j++) d[j] = T(1);
        }
        // X = [K; Q] of the chunk, so that each pair of products below is one GEMM
        for (int i = 0; i < n; i++) {
          std::copy(Kb + (size_t)(t0 + i) * ldk, Kb + (size_t)(t0 + i) * ldk + K, &X[(size_t)i * K]);
          std::copy(Qb + (size_t)(t0 + i) * ldk, Qb + (size_t)(t0 + i) * ldk + K, &X[(size_t)(n + i) * K]);
        }
        gemm(false, true, 2 * n, n, K, T(1), X.data(), K, X.data(), K, T(0), GP.data(), C);  // [K Kᵀ; Q Kᵀ]
        gemm(false, false, 2 * n, V, K, T(1), X.data(), K, S.data(), V, T(0), Y.data(), V);  // [K S; Q S]
        // L = (K Kᵀ ⊙ D) strictly below the diagonal (A = diag(β) L); P = scale (Q Kᵀ ⊙ D ⊙ M)
        T* Lm = GP.data();
        T* P = GP.data() + (size_t)n * C;
        for (int i = 0; i < n; i++) {
          const T* d = &D[(size_t)i * C];
          T* l = Lm + (size_t)i * C;
          T* p = P + (size_t)i * C;
          for (int j = 0; j < i; j++) l[j] *= d[j];
          for (int j = 0; j <= i; j++) p[j] *= scale * d[j];
          for (int j = i + 1; j < n; j++) p[j] = T(0);
        }
        // v_new = (I + A)^{−1} diag(β) (V − diag(exp(γ)) K S_prev), by blocked forward substitution:
        //   e_i = v_i − exp(γ_i) (K S_prev)_i − Σ_{j<i} L_ij v_new_j,   v_new_i = β_i e_i
        // (the same as forming Tm and w, u, but with n² V / 2 instead of n³ / 6 + n² (K + V) multiply-adds).
        // Rows go in diagonal blocks of kLanes: the part of the sum over the earlier blocks is one GEMM
        //   U[i0:i1] −= L[i0:i1, 0:i0] U[0:i0]                        (i1 − i0, V) −= (i1 − i0, i0) (i0, V)
        // and only the part within the block is substituted row by row.
        for (int i = 0; i < n; i++) {  // U (n, V) = V − diag(exp(γ)) K S_prev to start with
          const T ei = gb ? vec_exp(gam[i]) : T(1);
          const T* vi = Vb + (size_t)(t0 + i) * ldv;
          const T* ks = &Y[(size_t)i * V];
          T* ui = &U[(size_t)i * V];
          for (int j = 0; j < V; j++) ui[j] = vi[j] - ei * ks[j];
        }
        for (int i0 = 0; i0 < n; i0 += L) {
          const int i1 = std::min(n, i0 + L);
          if (i0 > 0)
            gemm(false, false, i1 - i0, V, i0, T(-1), Lm + (size_t)i0 * C, C, U.data(), V, T(1), &U[(size_t)i0 * V], V);
          for (int i = i0; i < i1; i++) {
            const T bi = betab[(size_t)(t0 + i) * H];
            const T* l = Lm + (size_t)i * C;
            T* ui = &U[(size_t)i * V];
            int j0 = 0;
            for (; j0 + L <= V; j0 += L) {  // lanes along V in registers, two partial sums over the rows
              T a0[L], a1[L] = {};
              for (int x = 0; x < L; x++) a0[x] = ui[j0 + x];
              int m = i0;
              for (; m + 2 <= i; m += 2) {
                const T* u0 = &U[(size_t)m * V + j0];
                const T* u1 = u0 + V;
                for (int x = 0; x < L; x++) {
                  a0[x] -= l[m] * u0[x];
                  a1[x] -= l[m + 1] * u1[x];
                }
              }
              if (m < i)
                for (int x = 0; x < L; x++) a0[x] -= l[m] * U[(size_t)m * V + j0 + x];
              for (int x = 0; x < L; x++) ui[j0 + x] = bi * (a0[x] + a1[x]);
            }
            for (; j0 < V; j0++) {
              T a0 = ui[j0];
              for (int m = i0; m < i; m++) a0 -= l[m] * U[(size_t)m * V + j0];
              ui[j0] = bi * a0;
            }
          }
        }
        // O = scale diag(exp(γ)) Q S_prev + P v_new
        T* Oc = Ob + (size_t)t0 * ldv;
        for (int i = 0; i < n; i++) {
          const T f = scale * (gb ? vec_exp(gam[i]) : T(1));
          const T* qs = &Y[(size_t)(n + i) * V];
          T* oi = Oc + (size_t)i * ldv;
          for (int j = 0; j < V; j++) oi[j] = f * qs[j];
        }
        gemm(false, false, n, V, n, T(1), P, C, U.data(), V, T(1), Oc, ldv);
        // S = exp(γ_last) S_prev + (exp(γ_last − γ) ⊙ K)ᵀ v_new
        const T glast = gam[n - 1];
        for (int i = 0; i < n; i++) {
          const T f = gb ? vec_exp(glast - gam[i]) : T(1);
          const T* ki = &X[(size_t)i * K];
          for (int j = 0; j < K; j++) Kd[(size_t)i * K + j] = f * ki[j];
        }
        if (gb) {
          const T a = vec_exp(glast);
          for (auto& x : S) x *= a;
        }
        gemm(true, false, K, V, n, T(1), Kd.data(), K, U.data(), V, T(1), S.data(), V);
      }
    }
  }
}

namespace delta_rule_detail {

// The body of delta_rule_backward_chunked. VPc, KC: the padded value width Vp and the key width K when they are
// known at compile time (then equal to the run-time values), or 0 for any.
template <int VPc, int KC, class T>
void backward_chunked_impl(T* dq, T* dk, T* dv, T* dbeta, T* dg, const T* dout, const T* states, const T* q,
                           const T* k, const T* v, const T* beta, const T* g, int Bn, int Tn, int H, int Krt, int V,
                           T scale, int chunk) {
  const int K = KC > 0 ? KC : Krt;
  constexpr int L = kLanes;
  const int nch = num_chunks(Tn, chunk);
  const int C = std::min(chunk, std::max(Tn, 1));
  const int Vp = VPc > 0 ? VPc : round_up_lanes(V);
  const size_t KV = (size_t)K * V, KVp = (size_t)K * Vp;
#pragma omp parallel
  {
    // per-thread scratch, rows padded to Vp: Sbuf (C, K, Vp) the state before each token of the chunk;
    // E, U (C, Vp) the errors e = v − S'ᵀ k and u = β e; Do (C, Vp) dout; dS (K, Vp) the carried state gradient;
    // P (2K, L) the partial sums of dk and dq rows, Pt their reduction scratch
    std::vector<T> Sbuf((size_t)C * KVp), E((size_t)C * Vp, T(0)), U((size_t)C * Vp, T(0)), Do((size_t)C * Vp, T(0));
    std::vector<T> dS(KVp), pred(Vp), du(Vp), dun(Vp), dun1(Vp), dpred(Vp), adpred(Vp), zero(Vp, T(0));
    std::vector<T> P((size_t)2 * K * L), Pt((size_t)28 * K), sums((size_t)2 * K);
#pragma omp for schedule(static)
    for (int bh = 0; bh < Bn * H; bh++) {
      const int b = bh / H, h = bh % H;
      const size_t row0 = (size_t)b * Tn * H + h;  // (b, t=0, h) in (B, T, H)
      const T* Sb = states + (size_t)bh * nch * KV;
      std::fill(dS.begin(), dS.end(), T(0));
      for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * chunk, n = std::min(chunk, Tn - t0);
        // ---- recompute the chunk forward from its checkpoint: Sbuf[i] = S before token t0 + i, E, U ----
        for (int r = 0; r < K; r++) {
          std::copy(Sb + (size_t)c * KV + (size_t)r * V, Sb + (size_t)c * KV + (size_t)(r + 1) * V,
                    &Sbuf[(size_t)r * Vp]);
          std::fill(&Sbuf[(size_t)r * Vp + V], &Sbuf[(size_t)r * Vp + Vp], T(0));
        }
        mat_t_vec(pred.data(), Sbuf.data(), k + (row0 + (size_t)t0 * H) * K, K, Vp);  // S_{t0−1}ᵀ k_{t0}
        for (int i = 0; i < n; i++) {
          const size_t bth = row0 + (size_t)(t0 + i) * H;
          const T a = g ? vec_exp(g[bth]) : T(1);
          const T bt = beta[bth];
          const T* vt = v + bth * V;
          T* e = &E[(size_t)i * Vp];
          T* u = &U[(size_t)i * Vp];
          for (int j = 0; j < V; j++) {
            e[j] = vt[j] - a * pred[j];
            u[j] = bt * e[j];
          }
          std::copy(dout + bth * V, dout + bth * V + V, &Do[(size_t)i * Vp]);
          if (i + 1 == n) break;  // the state after the chunk's last token is not needed
          // S before the next token, and pred = Sᵀ k_next for it
          const T* kt = k + bth * K;
          recompute_step<VPc, KC>(&Sbuf[(size_t)(i + 1) * KVp], pred.data(), &Sbuf[(size_t)i * KVp], u, kt,
                                  kt + (size_t)H * K, a, K, Vp);
        }
        // ---- backward over the chunk, last token first ----
        {
          // pass 1 of the last token
          const size_t bth = row0 + (size_t)(t0 + n - 1) * H;
          const T* qt = q + bth * K;
          const T* kt = k + bth * K;
          const T* dot = &Do[(size_t)(n - 1) * Vp];
          std::fill(du.begin(), du.end(), T(0));
          for (int r = 0; r < K; r++) {
            T* ds = &dS[(size_t)r * Vp];
            const T sq = scale * qt[r], kr = kt[r];
            for (int j = 0; j < Vp; j++) {
              ds[j] += sq * dot[j];
              du[j] += ds[j] * kr;
            }
          }
        }
        for (int i = n - 1; i >= 0; i--) {
          const size_t bth = row0 + (size_t)(t0 + i) * H;
          const T a = g ? vec_exp(g[bth]) : T(1);
          const T bt = beta[bth];
          const T* kt = k + bth * K;
          const T* dot = &Do[(size_t)i * Vp];
          const T* e = &E[(size_t)i * Vp];
          const T* u = &U[(size_t)i * Vp];
          const T* Sm = &Sbuf[(size_t)i * KVp];
          for (int j = 0; j < V; j++) dv[bth * V + j] = bt * du[j];
          for (int j = 0; j < Vp; j++) {
            dpred[j] = -bt * du[j];
            adpred[j] = a * dpred[j];
          }
          dbeta[bth] = lane_dot(du.data(), e, Vp);
          const T udo = lane_dot(u, dot, Vp);
          // pass 1 of the previous token (none before the chunk's first: a zero do leaves dS as it is)
          const bool prev = i > 0;
          const T* qp = prev ? q + (bth - H) * K : q;
          const T* kp = prev ? kt - (size_t)H * K : kt;
          const T* dop = prev ? &Do[(size_t)(i - 1) * Vp] : zero.data();
          // One sweep over the rows of dS; the row sums of dk and dq are left as kLanes partial sums per row in
          // P and reduced for all rows at once after the sweep.
          // du of the previous token accumulates in two halves (even and odd rows) to halve its dependency chain
          // (a loop of the compile-time length Vp, not std::fill: a call to memset here would spill the vector
          // registers holding this token's values around it)
          for (int j = 0; j < Vp; j++) dun[j] = dun1[j] = T(0);
          T gacc[L] = {};
          for (int r = 0; r < K; r++)
            backward_sweep_row<VPc>(&P[(size_t)r * L], &P[(size_t)(K + r) * L], gacc, &dS[(size_t)r * Vp],
                                    (r & 1) ? dun1.data() : dun.data(), Sm + (size_t)r * Vp, u, dpred.data(),
                                    adpred.data(), dot, dop, kt[r], prev ? scale * qp[r] : T(0), kp[r], a, Vp);
          for (int j = 0; j < Vp; j++) dun[j] += dun1[j];
          row_sums16(sums.data(), P.data(), Pt.data(), 2 * K);
          for (int r = 0; r < K; r++) {
            dk[bth * K + r] = sums[r];
            dq[bth * K + r] = scale * (a * sums[K + r] + kt[r] * udo);
          }
          if (dg) dg[bth] = a * lane_sum(gacc);
          std::swap(du, dun);
        }
      }
    }
  }
}

}  // namespace delta_rule_detail

// dq, dk: (B, T, H, K), dv: (B, T, H, V), dbeta: (B, T, H), dg: (B, T, H), all written; dg may be nullptr (and
// must be when g is); dout: (B, T, H, V); states: as written by delta_rule_forward_chunked with the same chunk;
// the rest as in forward.
//
// Per token, with a = exp(g_t), S_{t−1} the state before it, S' = a S_{t−1}, e = v_t − S'ᵀ k_t, u = β_t e and
// dS the gradient of the state after it, the recurrent backward of naive.h regrouped into two passes over the
// rows of dS:
//   pass 1:  dS += scale q_t do_tᵀ;  du = dSᵀ k_t
//            dv_t = β_t du;  dβ_t = <du, e>;  dpred = −β_t du
//   pass 2:  dk_t = dS u + S' dpred
//            dq_t = scale S_t do_t = scale (S' do_t + k_t (u · do_t))     (S_t = S' + k_t uᵀ, so S_t is not needed)
//            dS' = dS + k_t dpredᵀ;  dg_t = <S', dS'>_F;  dS <- a dS'
// Pass 2 of token t and pass 1 of token t − 1 touch the same row of dS one after the other, so they run as one
// sweep over the rows. Rows of the state and of dS are padded to whole vector lanes (Vp columns) with zeros,
// which the recurrence keeps zero, so every inner loop runs over full lanes.
template <class T>
void delta_rule_backward_chunked(T* dq, T* dk, T* dv, T* dbeta, T* dg, const T* dout, const T* states, const T* q,
                                 const T* k, const T* v, const T* beta, const T* g, int Bn, int Tn, int H, int K, int V,
                                 T scale, int chunk) {
  CANONLAB_CHECK(chunk >= 1, "delta_rule: chunk size must be at least 1");
  CANONLAB_CHECK(g || !dg, "delta_rule: dg requires g");
  using delta_rule_detail::backward_chunked_impl;
  const int Vp = delta_rule_detail::round_up_lanes(V);
  // Compile-time shapes let the compiler unroll the short row and lane loops (about a quarter off the backward at
  // K = V = 32), at the cost of one instantiation each, so only the float head shapes the presets use get one:
  // K = V (DeltaNet, expand_k = expand_v), 24 x 48 (GDN's default expand 0.75 / 1.5 at d_model 128, 4 heads),
  // K x 2K (expand_v 2). Everything else, and double, takes the general path.
  if constexpr (std::is_same_v<T, float>) {
#define CANONLAB_DELTA_BWD_CASE(KC, VPC)                                                                            \
  if (K == KC && Vp == VPC)                                                                                        \
    return backward_chunked_impl<VPC, KC>(dq, dk, dv, dbeta, dg, dout, states, q, k, v, beta, g, Bn, Tn, H, K, V, \
                                          scale, chunk);
    CANONLAB_DELTA_BWD_CASE(16, 16)
    CANONLAB_DELTA_BWD_CASE(32, 32)
    CANONLAB_DELTA_BWD_CASE(64, 64)
    CANONLAB_DELTA_BWD_CASE(24, 48)
    CANONLAB_DELTA_BWD_CASE(16, 32)
    CANONLAB_DELTA_BWD_CASE(32, 64)
#undef CANONLAB_DELTA_BWD_CASE
  }
  backward_chunked_impl<0, 0>(dq, dk, dv, dbeta, dg, dout, states, q, k, v, beta, g, Bn, Tn, H, K, V, scale, chunk);
}

}  // namespace canonlab
