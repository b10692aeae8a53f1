#pragma once
// The (gated) delta rule as element kernels (engine/ops/element_kernels.h): the algorithm of the CUDA kernels
// (delta_rule/cuda.cu launches these one thread per element), runnable on the host, where the CPU suite checks it
// against the naive recurrence and the chunked form (tests/unit/test_ops_delta_rule.cpp).
//
// Forward, per (b, h) and chunk of L tokens (local i, j; γ the in-chunk cumulative log decay, in double; D_ij =
// e^{γ_i − γ_j} for j <= i; S0 the state at the chunk start), the WY form of chunked.h:
//   A_ij = β_i (k_i·k_j) D_ij  (i > j)          Tm = (I + A)⁻¹, one column per element by substitution
//   W = Tm diag(β e^γ) K,  U = Tm diag(β) V     u = U − W S0 (the per-token updates, "v_new")
//   o_i = scale (e^{γ_i} S0ᵀ q_i + Σ_{j<=i} (q_i·k_j) D_ij u_j)
//   S_next = M S0 + Δ,  M = e^{γ_L} I − K̃ᵀ W,  Δ = K̃ᵀ U,  K̃_i = e^{γ_L − γ_i} k_i
// The state's columns (over V) evolve independently (S_next[:, c] = M S0[:, c] + Δ[:, c]), so the chunk-to-chunk
// passing is one element per (b, h, column), a K × K product per chunk.
//
// Backward, with do'_i = scale do_i and dSn = ∂loss/∂S_next (the state gradient after the chunk):
//   du_j  = Σ_{i>=j} (q_i·k_j) D_ij do'_i + e^{γ_L − γ_j} dSnᵀ k_j
//   dY    = Tmᵀ du,  dv_i = β_i dY_i,  dA_mi = −dY_m·u_i (m > i)
//   dS0   = Mᵀ dSn + E,  E = Σ_i e^{γ_i} q_i do'_iᵀ − Wᵀ du⁽ᵒ⁾  (du⁽ᵒ⁾: du without its dSn term): per column again
//   dq_i  = e^{γ_i} S0 do'_i + Σ_{j<=i} (do'_i·u_j) D_ij k_j
//   dk_i  = e^{γ_L − γ_i} dSn u_i + Σ_{i'>=i} (do'_i'·u_i) D_i'i q_i' − e^{γ_i} β_i S0 dY_i
//           + Σ_{j<i} dA_ij β_i D_ij k_j + Σ_{m>i} dA_mi β_m D_mi k_m
//   dβ_i  = dY_i·(v_i − e^{γ_i} S0ᵀ k_i) + Σ_{j<i} dA_ij (k_i·k_j) D_ij
//   dγ_i  collects the terms whose factor contains γ_i (every e^{γ_i − γ_j} gives +to i and −to j), e^{γ_L} terms
//         go to the chunk's carry; dg_m = Σ_{i>=m in the chunk} dγ_i + carry.
// Each element sums in a fixed order: the same bits however elements are scheduled, no atomics. Scratch:
// delta_rule_element_scratch_bytes(); nothing is allocated here.
#include <algorithm>
#include <cstddef>

#include "engine/error.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/element_kernels.h"

namespace canonlab {

// e^x of a log decay x <= 0; 0 below e^−87 in float (no subnormals in the sums).
CANONLAB_HD inline float delta_decay_factor(float x) { return x < -87.0f ? 0.0f : hd_exp(x); }
CANONLAB_HD inline double delta_decay_factor(double x) { return hd_exp(x); }

// q, k, dq, dk: (Bn, Tn, H, K); v, o, dout, dv: (Bn, Tn, H, V); beta, g, dbeta, dg: (Bn, Tn, H), g and dg null for
// DeltaNet; states: (Bn, H, nch, K, V), the state before each chunk.
template <class T>
struct DeltaView : ChunkGrid {
  int K = 0, V = 0;
  T scale = T(1);
  const T *q = nullptr, *k = nullptr, *v = nullptr, *beta = nullptr, *g = nullptr, *dout = nullptr;
  T *o = nullptr, *states = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbeta = nullptr, *dg = nullptr;
  // scratch. gam, dgam, z: (Bn, H, Tn) double; carry: (Bn, H, nch) double.
  // (Bn, H, nch, Lc, Lc): QK (q_i·k_j, j <= i), A (strict lower), Tm, dPu (do'_i·u_j), dA.
  // (Bn, H, nch, Lc, K): W.   (Bn, H, nch, Lc, V): U, u, duo, du, dY.
  // (Bn, H, nch, K, K): M.    (Bn, H, nch, K, V): Delta, E, dstate (dstate[c] = ∂loss/∂(state after chunk c)).
  double *gam = nullptr, *dgam = nullptr, *z = nullptr, *carry = nullptr;
  T *QK = nullptr, *A = nullptr, *Tm = nullptr, *dPu = nullptr, *dA = nullptr, *W = nullptr, *U = nullptr,
    *u = nullptr, *duo = nullptr, *du = nullptr, *dY = nullptr, *M = nullptr, *Delta = nullptr, *E = nullptr,
    *dstate = nullptr;

  CANONLAB_HD size_t ik(int b, int t, int h) const { return (((size_t)b * Tn + t) * H + h) * K; }
  CANONLAB_HD size_t iv(int b, int t, int h) const { return (((size_t)b * Tn + t) * H + h) * V; }
  CANONLAB_HD size_t it(int b, int t, int h) const { return ((size_t)b * Tn + t) * H + h; }
  CANONLAB_HD size_t gi(int b, int h, int t) const { return ((size_t)b * H + h) * Tn + t; }
  CANONLAB_HD size_t mi(int b, int h, int c) const { return chunk_id(b, h, c) * Lc * Lc; }
  CANONLAB_HD size_t rk(int b, int h, int c) const { return chunk_id(b, h, c) * Lc * K; }
  CANONLAB_HD size_t rv(int b, int h, int c) const { return chunk_id(b, h, c) * Lc * V; }
  CANONLAB_HD size_t kk(int b, int h, int c) const { return chunk_id(b, h, c) * K * K; }
  CANONLAB_HD size_t sti(int b, int h, int c) const { return chunk_id(b, h, c) * K * V; }
  // e^{γ_t − γ_s} for tokens t >= s of one chunk (1 without gates), and e^{γ_t}
  CANONLAB_HD T decay_between(int b, int h, int t, int s) const {
    return delta_decay_factor(T(gam[gi(b, h, t)] - gam[gi(b, h, s)]));
  }
  CANONLAB_HD T decay_from_start(int b, int h, int t) const { return delta_decay_factor(T(gam[gi(b, h, t)])); }
  CANONLAB_HD T dot_k(const T* x, const T* y) const {
    T s = T(0);
    for (int a = 0; a < K; a++) s += x[a] * y[a];
    return s;
  }
};

namespace delta_elements {

// Decomposes an index of a (Bn, H, nch, rows, cols) array.
struct ChunkIndex {
  int b, h, c, r, col;
};
template <class T>
CANONLAB_HD ChunkIndex chunk_index(const DeltaView<T>& v, size_t i, size_t rows, size_t cols) {
  ChunkIndex x;
  x.col = int(i % cols);
  x.r = int(i / cols % rows);
  const size_t bhc = i / cols / rows;
  x.c = int(bhc % v.nch);
  x.h = int(bhc / v.nch % v.H);
  x.b = int(bhc / v.nch / v.H);
  return x;
}
// Decomposes an index of a (Bn, Tn, H, cols) array.
struct TokenIndex {
  int b, t, h, col, c, t0, i;  // c: the chunk, t0 its first token, i the token within it
};
template <class T>
CANONLAB_HD TokenIndex token_index(const DeltaView<T>& v, size_t idx, size_t cols) {
  TokenIndex x;
  x.col = int(idx % cols);
  x.h = int(idx / cols % v.H);
  x.t = int(idx / cols / v.H % v.Tn);
  x.b = int(idx / cols / v.H / v.Tn);
  x.c = x.t / v.chunk, x.t0 = x.c * v.chunk, x.i = x.t - x.t0;
  return x;
}

// γ per chunk (0 without gates).   One element per (b, h, chunk).
template <class T>
struct Cumsum {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int c = int(idx % v.nch), h = int(idx / v.nch % v.H), b = int(idx / v.nch / v.H);
    const int t0 = c * v.chunk, L = v.length(c);
    double run = 0;
    for (int t = t0; t < t0 + L; t++) {
      if (v.g) run += double(v.g[v.it(b, t, h)]);
      v.gam[v.gi(b, h, t)] = run;
    }
  }
};

// QK_ij = q_i·k_j (j <= i) and A_ij = β_i (k_i·k_j) D_ij (j < i), zero elsewhere.   One element per
// (b, h, chunk, i, j).
template <class T>
struct Scores {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.Lc);
    const int i = x.r, j = x.col, t0 = x.c * v.chunk;
    T qk = T(0), a = T(0);
    if (i < v.length(x.c) && j <= i) {
      const T* kj = v.k + v.ik(x.b, t0 + j, x.h);
      qk = v.dot_k(v.q + v.ik(x.b, t0 + i, x.h), kj);
      if (j < i)
        a = (v.beta[v.it(x.b, t0 + i, x.h)] * v.dot_k(v.k + v.ik(x.b, t0 + i, x.h), kj)) *
            v.decay_between(x.b, x.h, t0 + i, t0 + j);
    }
    v.QK[idx] = qk;
    v.A[idx] = a;
  }
};

// Column j of Tm = (I + A)⁻¹ by forward substitution: Tm_jj = 1, Tm_ij = −Σ_{j<=m<i} A_im Tm_mj for i > j, 0 above.
// One element per (b, h, chunk, j).
template <class T>
struct Inverse {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int j = int(idx % v.Lc), c = int(idx / v.Lc % v.nch), h = int(idx / v.Lc / v.nch % v.H);
    const int b = int(idx / v.Lc / v.nch / v.H), L = v.length(c);
    const size_t m0 = v.mi(b, h, c), Lc = v.Lc;
    for (int i = 0; i < v.Lc; i++) {
      T x = T(0);
      if (i < L && j < L && i >= j) {
        if (i == j) {
          x = T(1);
        } else {
          for (int m = j; m < i; m++) x -= v.A[m0 + i * Lc + m] * v.Tm[m0 + m * Lc + j];
        }
      }
      v.Tm[m0 + i * Lc + j] = x;
    }
  }
};

// W_ia = Σ_{m<=i} Tm_im (β_m e^{γ_m}) k_ma.   One element per (b, h, chunk, i, a).
template <class T>
struct WeightsW {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.K);
    const int i = x.r, t0 = x.c * v.chunk;
    T acc = T(0);
    if (i < v.length(x.c)) {
      const T* Tm = v.Tm + v.mi(x.b, x.h, x.c) + (size_t)i * v.Lc;
      for (int m = 0; m <= i; m++)
        acc += Tm[m] * ((v.beta[v.it(x.b, t0 + m, x.h)] * v.decay_from_start(x.b, x.h, t0 + m)) *
                        v.k[v.ik(x.b, t0 + m, x.h) + x.col]);
    }
    v.W[idx] = acc;
  }
};

// U_ic = Σ_{m<=i} Tm_im β_m v_mc.   One element per (b, h, chunk, i, c).
template <class T>
struct WeightsU {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.V);
    const int i = x.r, t0 = x.c * v.chunk;
    T acc = T(0);
    if (i < v.length(x.c)) {
      const T* Tm = v.Tm + v.mi(x.b, x.h, x.c) + (size_t)i * v.Lc;
      for (int m = 0; m <= i; m++)
        acc += Tm[m] * (v.beta[v.it(x.b, t0 + m, x.h)] * v.v[v.iv(x.b, t0 + m, x.h) + x.col]);
    }
    v.U[idx] = acc;
  }
};

// M[a, a2] = e^{γ_L} [a == a2] − Σ_i e^{γ_L − γ_i} k_ia W_ia2: the chunk's state transition (0 for the last chunk,
// whose end state is not needed).   One element per (b, h, chunk, a, a2).
template <class T>
struct Transition {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.K, v.K);
    T acc = T(0);
    if (x.c + 1 < v.nch) {
      const int t0 = x.c * v.chunk, last = t0 + v.length(x.c) - 1;
      const T* W = v.W + v.rk(x.b, x.h, x.c) + x.col;
      for (int t = t0; t <= last; t++)
        acc -= (v.decay_between(x.b, x.h, last, t) * v.k[v.ik(x.b, t, x.h) + x.r]) * W[(size_t)(t - t0) * v.K];
      if (x.r == x.col) acc += v.decay_from_start(x.b, x.h, last);
    }
    v.M[idx] = acc;
  }
};

// Delta[a, c] = Σ_i e^{γ_L − γ_i} k_ia U_ic (0 for the last chunk).   One element per (b, h, chunk, a, c).
template <class T>
struct TransitionInput {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.K, v.V);
    T acc = T(0);
    if (x.c + 1 < v.nch) {
      const int t0 = x.c * v.chunk, last = t0 + v.length(x.c) - 1;
      const T* U = v.U + v.rv(x.b, x.h, x.c) + x.col;
      for (int t = t0; t <= last; t++)
        acc += (v.decay_between(x.b, x.h, last, t) * v.k[v.ik(x.b, t, x.h) + x.r]) * U[(size_t)(t - t0) * v.V];
    }
    v.Delta[idx] = acc;
  }
};

// One state column carried through the chunks by their transitions M_n (K × K; chunk n's maps states[n] to
// states[n + 1]). forward: states[0][:, c] = 0, states[n + 1][:, c] = M_n states[n][:, c] + Delta_n[:, c];
// backward: dstate[last][:, c] = 0, dstate[n − 1][:, c] = M_nᵀ dstate[n][:, c] + E_n[:, c].   One element per
// (b, h, c).
template <class T>
struct StatePassing {
  DeltaView<T> v;
  bool forward;
  CANONLAB_HD void operator()(size_t idx) const {
    const int col = int(idx % v.V), h = int(idx / v.V % v.H), b = int(idx / v.V / v.H);
    T* out = (forward ? v.states : v.dstate) + v.sti(b, h, 0) + col;  // chunk n's entries K·V further
    const T* in = (forward ? v.Delta : v.E) + v.sti(b, h, 0) + col;
    const T* M0 = v.M + v.kk(b, h, 0);
    const size_t KV = (size_t)v.K * v.V, KK = (size_t)v.K * v.K;
    const int first = forward ? 0 : v.nch - 1;
    for (int a = 0; a < v.K; a++) out[first * KV + (size_t)a * v.V] = T(0);
    for (int step = 0; step + 1 < v.nch; step++) {
      const int n = forward ? step : v.nch - 1 - step, to = forward ? n + 1 : n - 1;
      const T* src = out + n * KV;
      const T* M = M0 + n * KK;
      for (int a = 0; a < v.K; a++) {
        T acc = T(0);
        for (int a2 = 0; a2 < v.K; a2++)
          acc += (forward ? M[(size_t)a * v.K + a2] : M[(size_t)a2 * v.K + a]) * src[(size_t)a2 * v.V];
        out[to * KV + (size_t)a * v.V] = acc + in[n * KV + (size_t)a * v.V];
      }
    }
  }
};

// u_ic = U_ic − Σ_a W_ia S0[a, c]: the per-token updates.   One element per (b, h, chunk, i, c).
template <class T>
struct Updates {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.V);
    T acc = T(0);
    if (x.r < v.length(x.c)) {
      acc = v.U[idx];
      const T* W = v.W + v.rk(x.b, x.h, x.c) + (size_t)x.r * v.K;
      const T* S0 = v.states + v.sti(x.b, x.h, x.c) + x.col;
      T ws = T(0);
      for (int a = 0; a < v.K; a++) ws += W[a] * S0[(size_t)a * v.V];
      acc -= ws;
    }
    v.u[idx] = acc;
  }
};

// o_i[c] = scale (e^{γ_i} Σ_a q_ia S0[a, c] + Σ_{j<=i} QK_ij D_ij u_jc).   One element per (b, t, h, c).
template <class T>
struct Output {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const TokenIndex x = token_index(v, idx, v.V);
    T acc = T(0);
    if (x.c > 0) {
      const T* q = v.q + v.ik(x.b, x.t, x.h);
      const T* S0 = v.states + v.sti(x.b, x.h, x.c) + x.col;
      T inter = T(0);
      for (int a = 0; a < v.K; a++) inter += q[a] * S0[(size_t)a * v.V];
      acc = v.decay_from_start(x.b, x.h, x.t) * inter;
    }
    const T* QK = v.QK + v.mi(x.b, x.h, x.c) + (size_t)x.i * v.Lc;
    const T* u = v.u + v.rv(x.b, x.h, x.c) + x.col;
    for (int j = 0; j <= x.i; j++)
      acc += (QK[j] * v.decay_between(x.b, x.h, x.t, x.t0 + j)) * u[(size_t)j * v.V];
    v.o[idx] = v.scale * acc;
  }
};

// ---- backward ----

// dPu_ij = do'_i·u_j for j <= i, else 0.   One element per (b, h, chunk, i, j).
template <class T>
struct OutputScoreGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.Lc);
    const int i = x.r, j = x.col, t0 = x.c * v.chunk;
    T acc = T(0);
    if (i < v.length(x.c) && j <= i) {
      const T* dout = v.dout + v.iv(x.b, t0 + i, x.h);
      const T* u = v.u + v.rv(x.b, x.h, x.c) + (size_t)j * v.V;
      for (int col = 0; col < v.V; col++) acc += (v.scale * dout[col]) * u[col];
    }
    v.dPu[idx] = acc;
  }
};

// duo_jc = Σ_{i>=j} QK_ij D_ij do'_ic: the outputs' share of du.   One element per (b, h, chunk, j, c).
template <class T>
struct OutputUpdateGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.V);
    const int j = x.r, t0 = x.c * v.chunk, L = v.length(x.c);
    T acc = T(0);
    const T* QK = v.QK + v.mi(x.b, x.h, x.c) + j;
    for (int i = j; i < L; i++)
      acc += (QK[(size_t)i * v.Lc] * v.decay_between(x.b, x.h, t0 + i, t0 + j)) *
             (v.scale * v.dout[v.iv(x.b, t0 + i, x.h) + x.col]);
    v.duo[idx] = acc;
  }
};

// E[a, c] = Σ_i e^{γ_i} q_ia do'_ic − Σ_i W_ia duo_ic: dS0 when dSn is 0 (0 for the first chunk, whose incoming
// state is 0).   One element per (b, h, chunk, a, c).
template <class T>
struct LocalStateGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.K, v.V);
    T acc = T(0);
    if (x.c > 0) {
      const int t0 = x.c * v.chunk, L = v.length(x.c);
      const T* W = v.W + v.rk(x.b, x.h, x.c) + x.r;
      const T* duo = v.duo + v.rv(x.b, x.h, x.c) + x.col;
      for (int i = 0; i < L; i++) {
        const T qo = (v.decay_from_start(x.b, x.h, t0 + i) * v.q[v.ik(x.b, t0 + i, x.h) + x.r]) *
                     (v.scale * v.dout[v.iv(x.b, t0 + i, x.h) + x.col]);
        acc += qo - W[(size_t)i * v.K] * duo[(size_t)i * v.V];
      }
    }
    v.E[idx] = acc;
  }
};

// du_jc = duo_jc + e^{γ_L − γ_j} Σ_a k_ja dSn[a, c] (no dSn after the last chunk).   One element per
// (b, h, chunk, j, c).
template <class T>
struct UpdateGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.V);
    const int t0 = x.c * v.chunk, L = v.length(x.c);
    T acc = T(0);
    if (x.r < L) {
      acc = v.duo[idx];
      if (x.c + 1 < v.nch) {
        const T* k = v.k + v.ik(x.b, t0 + x.r, x.h);
        const T* dS = v.dstate + v.sti(x.b, x.h, x.c) + x.col;
        T kd = T(0);
        for (int a = 0; a < v.K; a++) kd += k[a] * dS[(size_t)a * v.V];
        acc += v.decay_between(x.b, x.h, t0 + L - 1, t0 + x.r) * kd;
      }
    }
    v.du[idx] = acc;
  }
};

// dY_ic = Σ_{m>=i} Tm_mi du_mc (Tmᵀ du: the substitution's transpose).   One element per (b, h, chunk, i, c).
template <class T>
struct SolveGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.V);
    const int L = v.length(x.c);
    const T* Tm = v.Tm + v.mi(x.b, x.h, x.c) + x.r;
    const T* du = v.du + v.rv(x.b, x.h, x.c) + x.col;
    T acc = T(0);
    for (int m = x.r; m < L; m++) acc += Tm[(size_t)m * v.Lc] * du[(size_t)m * v.V];
    v.dY[idx] = acc;
  }
};

// dA_mi = −dY_m·u_i for m > i, else 0.   One element per (b, h, chunk, m, i).
template <class T>
struct CouplingGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const ChunkIndex x = chunk_index(v, idx, v.Lc, v.Lc);
    const int m = x.r, i = x.col;
    T acc = T(0);
    if (m < v.length(x.c) && i < m) {
      const T* dY = v.dY + v.rv(x.b, x.h, x.c) + (size_t)m * v.V;
      const T* u = v.u + v.rv(x.b, x.h, x.c) + (size_t)i * v.V;
      for (int col = 0; col < v.V; col++) acc += dY[col] * u[col];
    }
    v.dA[idx] = -acc;
  }
};

// dv_i = β_i dY_i.   One element per (b, t, h, c).
template <class T>
struct ValueGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const TokenIndex x = token_index(v, idx, v.V);
    v.dv[idx] = v.beta[v.it(x.b, x.t, x.h)] * v.dY[v.rv(x.b, x.h, x.c) + (size_t)x.i * v.V + x.col];
  }
};

// dq_i[a] = e^{γ_i} Σ_c S0[a, c] do'_ic + Σ_{j<=i} dPu_ij D_ij k_ja.   One element per (b, t, h, a).
template <class T>
struct QueryGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const TokenIndex x = token_index(v, idx, v.K);
    T acc = T(0);
    if (x.c > 0) {
      const T* S0 = v.states + v.sti(x.b, x.h, x.c) + (size_t)x.col * v.V;
      const T* dout = v.dout + v.iv(x.b, x.t, x.h);
      T inter = T(0);
      for (int col = 0; col < v.V; col++) inter += S0[col] * (v.scale * dout[col]);
      acc = v.decay_from_start(x.b, x.h, x.t) * inter;
    }
    const T* dPu = v.dPu + v.mi(x.b, x.h, x.c) + (size_t)x.i * v.Lc;
    for (int j = 0; j <= x.i; j++)
      acc += (dPu[j] * v.decay_between(x.b, x.h, x.t, x.t0 + j)) * v.k[v.ik(x.b, x.t0 + j, x.h) + x.col];
    v.dq[idx] = acc;
  }
};

// dk_i[a] = e^{γ_L − γ_i} Σ_c dSn[a, c] u_ic + Σ_{i'>=i} dPu_i'i D_i'i q_i'a − e^{γ_i} β_i Σ_c S0[a, c] dY_ic
//           + Σ_{j<i} dA_ij β_i D_ij k_ja + Σ_{m>i} dA_mi β_m D_mi k_ma.   One element per (b, t, h, a).
template <class T>
struct KeyGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const TokenIndex x = token_index(v, idx, v.K);
    const int a = x.col, i = x.i, t0 = x.t0, L = v.length(x.c), last = t0 + L - 1;
    const size_t m0 = v.mi(x.b, x.h, x.c), Lc = v.Lc;
    const T* u = v.u + v.rv(x.b, x.h, x.c) + (size_t)i * v.V;
    const T* dY = v.dY + v.rv(x.b, x.h, x.c) + (size_t)i * v.V;
    T acc = T(0);
    if (x.c + 1 < v.nch) {
      const T* dS = v.dstate + v.sti(x.b, x.h, x.c) + (size_t)a * v.V;
      T s = T(0);
      for (int col = 0; col < v.V; col++) s += dS[col] * u[col];
      acc += v.decay_between(x.b, x.h, last, x.t) * s;
    }
    for (int i2 = i; i2 < L; i2++)
      acc += (v.dPu[m0 + i2 * Lc + i] * v.decay_between(x.b, x.h, t0 + i2, x.t)) * v.q[v.ik(x.b, t0 + i2, x.h) + a];
    const T beta_i = v.beta[v.it(x.b, x.t, x.h)];
    if (x.c > 0) {
      const T* S0 = v.states + v.sti(x.b, x.h, x.c) + (size_t)a * v.V;
      T s = T(0);
      for (int col = 0; col < v.V; col++) s += S0[col] * dY[col];
      acc -= (v.decay_from_start(x.b, x.h, x.t) * beta_i) * s;
    }
    for (int j = 0; j < i; j++)
      acc += (v.dA[m0 + i * Lc + j] * beta_i * v.decay_between(x.b, x.h, x.t, t0 + j)) * v.k[v.ik(x.b, t0 + j, x.h) + a];
    for (int m = i + 1; m < L; m++)
      acc += (v.dA[m0 + m * Lc + i] * v.beta[v.it(x.b, t0 + m, x.h)] * v.decay_between(x.b, x.h, t0 + m, x.t)) *
             v.k[v.ik(x.b, t0 + m, x.h) + a];
    v.dk[idx] = acc;
  }
};

// Per token: dβ_i = dY_i·(v_i − e^{γ_i} S0ᵀ k_i) + Σ_{j<i} dA_ij (k_i·k_j) D_ij, written; with gates also the
// token's share of the decay gradient dγ_i (double) and z_i = e^{γ_L − γ_i} k_iᵀ dSn u_i, which goes to γ_L too.
// One element per (b, h, t).
template <class T>
struct TokenGrads {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int t = int(idx % v.Tn), h = int(idx / v.Tn % v.H), b = int(idx / v.Tn / v.H);
    const int c = t / v.chunk, t0 = c * v.chunk, i = t - t0, L = v.length(c), last = t0 + L - 1;
    const size_t m0 = v.mi(b, h, c), Lc = v.Lc;
    const T* k = v.k + v.ik(b, t, h);
    const T* q = v.q + v.ik(b, t, h);
    const T* vi = v.v + v.iv(b, t, h);
    const T* dY = v.dY + v.rv(b, h, c) + (size_t)i * v.V;
    const T* u = v.u + v.rv(b, h, c) + (size_t)i * v.V;
    const T* dout = v.dout + v.iv(b, t, h);
    const T* S0 = v.states + v.sti(b, h, c);
    const T e_i = v.decay_from_start(b, h, t), beta_i = v.beta[v.it(b, t, h)];
    // S0-side scalars of this token: k_iᵀ S0 dY_i and q_iᵀ S0 do'_i (0 in the first chunk), and dY_i·v_i
    T kSdY = T(0), qSdo = T(0), dYv = T(0);
    for (int col = 0; col < v.V; col++) dYv += dY[col] * vi[col];
    if (c > 0)
      for (int a = 0; a < v.K; a++) {
        const T* Sa = S0 + (size_t)a * v.V;
        T sdy = T(0), sdo = T(0);
        for (int col = 0; col < v.V; col++) {
          sdy += Sa[col] * dY[col];
          sdo += Sa[col] * (v.scale * dout[col]);
        }
        kSdY += k[a] * sdy;
        qSdo += q[a] * sdo;
      }
    // dβ_i
    T coupling = T(0);
    for (int j = 0; j < i; j++)
      coupling += v.dA[m0 + i * Lc + j] * v.dot_k(k, v.k + v.ik(b, t0 + j, h)) * v.decay_between(b, h, t, t0 + j);
    v.dbeta[v.it(b, t, h)] = (dYv - e_i * kSdY) + coupling;
    if (!v.g) return;
    // dγ_i: + e^{γ_i} q_iᵀ S0 do'_i − e^{γ_i} β_i k_iᵀ S0 dY_i (the incoming state's decay to token i)
    double dgam = double(e_i) * double(qSdo) - double(e_i) * double(beta_i) * double(kSdY);
    // the output scores (q_i·k_j) D_ij and the couplings A_ij = β_i (k_i·k_j) D_ij: + as the later token, − as the
    // earlier one
    for (int j = 0; j < i; j++) {
      const size_t ij = m0 + i * Lc + j;
      const T D = v.decay_between(b, h, t, t0 + j);
      dgam += double(v.dPu[ij] * v.QK[ij] * D) + double(v.dA[ij] * v.A[ij]);
    }
    for (int m = i + 1; m < L; m++) {
      const size_t mi = m0 + m * Lc + i;
      const T D = v.decay_between(b, h, t0 + m, t);
      dgam -= double(v.dPu[mi] * v.QK[mi] * D) + double(v.dA[mi] * v.A[mi]);
    }
    // through the state after the chunk: z_i = e^{γ_L − γ_i} k_iᵀ dSn u_i, − to γ_i, + to γ_L (the carry)
    double z = 0;
    if (c + 1 < v.nch) {
      const T* dS = v.dstate + v.sti(b, h, c);
      T s = T(0);
      for (int a = 0; a < v.K; a++) {
        const T* dSa = dS + (size_t)a * v.V;
        T r = T(0);
        for (int col = 0; col < v.V; col++) r += dSa[col] * u[col];
        s += k[a] * r;
      }
      z = double(v.decay_between(b, h, last, t)) * double(s);
    }
    v.dgam[v.gi(b, h, t)] = dgam - z;
    v.z[v.gi(b, h, t)] = z;
  }
};

// carry = e^{γ_L} <dSn, S0> + Σ_i z_i: the gradient of γ_L from the state after the chunk (0 for the last chunk).
// One element per (b, h, chunk).
template <class T>
struct ChunkCarry {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int c = int(idx % v.nch), h = int(idx / v.nch % v.H), b = int(idx / v.nch / v.H);
    double carry = 0;
    if (c + 1 < v.nch) {
      const int t0 = c * v.chunk, last = t0 + v.length(c) - 1;
      const size_t KV = (size_t)v.K * v.V;
      const T* dS = v.dstate + v.sti(b, h, c);
      const T* S0 = v.states + v.sti(b, h, c);
      T dot = T(0);
      for (size_t e = 0; e < KV; e++) dot += dS[e] * S0[e];
      carry = double(v.decay_from_start(b, h, last)) * double(dot);
      for (int t = t0; t <= last; t++) carry += v.z[v.gi(b, h, t)];
    }
    v.carry[idx] = carry;
  }
};

// dg_m = Σ_{i>=m in the chunk} dγ_i + carry (γ_i contains g_m for every i >= m).   One element per (b, h, t).
template <class T>
struct GateGrad {
  DeltaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int t = int(idx % v.Tn), h = int(idx / v.Tn % v.H), b = int(idx / v.Tn / v.H);
    const int c = t / v.chunk, last = c * v.chunk + v.length(c) - 1;
    double s = v.carry[v.chunk_id(b, h, c)];
    for (int u = last; u >= t; u--) s += v.dgam[v.gi(b, h, u)];
    v.dg[v.it(b, t, h)] = T(s);
  }
};

// Where each scratch region lies in the one buffer.
struct DeltaScratch {
  size_t gam, QK, A, Tm, W, U, M, Delta, u, dgam, z, carry, dPu, duo, E, dstate, du, dY, dA, bytes;
};

template <class T>
DeltaScratch delta_scratch_layout(int Bn, int Tn, int H, int K, int V, int chunk, bool backward) {
  const size_t nch = chunk > 0 && Tn > 0 ? (size_t)(Tn + chunk - 1) / chunk : 0;
  const size_t Lc = (size_t)std::max(0, std::min(chunk, Tn)), bhc = (size_t)std::max(0, Bn) * H * nch;
  const size_t tokens = (size_t)std::max(0, Bn) * H * std::max(0, Tn);
  ScratchLayout s;
  DeltaScratch o{};
  o.gam = s.reserve<double>(tokens);
  o.QK = s.reserve<T>(bhc * Lc * Lc);
  o.A = s.reserve<T>(bhc * Lc * Lc);
  o.Tm = s.reserve<T>(bhc * Lc * Lc);
  o.W = s.reserve<T>(bhc * Lc * K);
  o.U = s.reserve<T>(bhc * Lc * V);
  o.M = s.reserve<T>(bhc * K * K);
  o.u = s.reserve<T>(bhc * Lc * V);
  if (!backward) {
    o.Delta = s.reserve<T>(bhc * K * V);
  } else {
    o.dgam = s.reserve<double>(tokens);
    o.z = s.reserve<double>(tokens);
    o.carry = s.reserve<double>(bhc);
    o.dPu = s.reserve<T>(bhc * Lc * Lc);
    o.duo = s.reserve<T>(bhc * Lc * V);
    o.E = s.reserve<T>(bhc * K * V);
    o.dstate = s.reserve<T>(bhc * K * V);
    o.du = s.reserve<T>(bhc * Lc * V);
    o.dY = s.reserve<T>(bhc * Lc * V);
    o.dA = s.reserve<T>(bhc * Lc * Lc);
  }
  o.bytes = s.bytes();
  return o;
}

template <class T>
DeltaView<T> make_view(void* scratch, int Bn, int Tn, int H, int K, int V, T scale, int chunk, bool backward) {
  CANONLAB_CHECK(chunk >= 1, "delta_rule: chunk size must be at least 1");
  const DeltaScratch at = delta_scratch_layout<T>(Bn, Tn, H, K, V, chunk, backward);
  DeltaView<T> v;
  v.set_grid(Bn, Tn, H, chunk);
  v.K = K, v.V = V, v.scale = scale;
  v.gam = scratch_at<double>(scratch, at.gam);
  v.QK = scratch_at<T>(scratch, at.QK);
  v.A = scratch_at<T>(scratch, at.A);
  v.Tm = scratch_at<T>(scratch, at.Tm);
  v.W = scratch_at<T>(scratch, at.W);
  v.U = scratch_at<T>(scratch, at.U);
  v.M = scratch_at<T>(scratch, at.M);
  v.u = scratch_at<T>(scratch, at.u);
  if (!backward) {
    v.Delta = scratch_at<T>(scratch, at.Delta);
  } else {
    v.dgam = scratch_at<double>(scratch, at.dgam);
    v.z = scratch_at<double>(scratch, at.z);
    v.carry = scratch_at<double>(scratch, at.carry);
    v.dPu = scratch_at<T>(scratch, at.dPu);
    v.duo = scratch_at<T>(scratch, at.duo);
    v.E = scratch_at<T>(scratch, at.E);
    v.dstate = scratch_at<T>(scratch, at.dstate);
    v.du = scratch_at<T>(scratch, at.du);
    v.dY = scratch_at<T>(scratch, at.dY);
    v.dA = scratch_at<T>(scratch, at.dA);
  }
  return v;
}

// The forward's chunk-local pieces, also recomputed by the backward: γ, the scores, Tm, W, U and the transitions.
template <class T, class Launch>
void chunk_pieces(const Launch& launch, const DeltaView<T>& w) {
  const size_t bhc = (size_t)w.Bn * w.H * w.nch, Lc = w.Lc;
  launch((size_t)w.Bn * w.H * w.nch, Cumsum<T>{w});
  launch(bhc * Lc * Lc, Scores<T>{w});
  launch(bhc * Lc, Inverse<T>{w});
  launch(bhc * Lc * w.K, WeightsW<T>{w});
  launch(bhc * Lc * w.V, WeightsU<T>{w});
  launch(bhc * w.K * w.K, Transition<T>{w});
}

}  // namespace delta_elements

// ---- decoding: one token of Bn sequences (delta_rule_step's arithmetic, in double inside each element) ----

namespace delta_elements {

// One state column: pred = (a S[:, c])ᵀ k, u = β (v_c − pred), S[:, c] = a S[:, c] + k u, o_c = scale S[:, c]ᵀ q.
// Columns are independent.   One element per (b, h, c).
template <class T>
struct Step {
  T *o_t, *state;
  const T *q_t, *k_t, *v_t, *beta_t, *g_t;
  int H, K, V;
  T scale;
  CANONLAB_HD void operator()(size_t i) const {
    const int c = int(i % V);
    const size_t bh = i / V;
    const double a = g_t ? hd_exp(double(g_t[bh])) : 1.0;
    const T* k = k_t + bh * K;
    const T* q = q_t + bh * K;
    T* S = state + bh * K * V + c;
    double pred = 0;
    for (int r = 0; r < K; r++) pred += double(S[(size_t)r * V]) * double(k[r]);
    const double u = double(beta_t[bh]) * (double(v_t[bh * V + c]) - a * pred);
    double acc = 0;
    for (int r = 0; r < K; r++) {
      T& s = S[(size_t)r * V];
      s = T(a * double(s) + double(k[r]) * u);
      acc += double(s) * double(q[r]);
    }
    o_t[i] = T(double(scale) * acc);
  }
};

}  // namespace delta_elements

// delta_rule_step for Bn sequences at once: o_t: (Bn, H, V) written; state: (Bn, H, K, V) updated; q_t, k_t:
// (Bn, H, K); v_t: (Bn, H, V); beta_t: (Bn, H); g_t: (Bn, H) or nullptr (DeltaNet).
template <class T, class Launch>
void delta_rule_step_elements(const Launch& launch, T* o_t, T* state, const T* q_t, const T* k_t, const T* v_t,
                              const T* beta_t, const T* g_t, int Bn, int H, int K, int V, T scale) {
  launch((size_t)Bn * H * V, delta_elements::Step<T>{o_t, state, q_t, k_t, v_t, beta_t, g_t, H, K, V, scale});
}

// Bytes of scratch delta_rule_forward_elements (backward = false) or delta_rule_backward_elements needs.
template <class T>
size_t delta_rule_element_scratch_bytes(int Bn, int Tn, int H, int K, int V, int chunk, bool backward) {
  return delta_elements::delta_scratch_layout<T>(Bn, Tn, H, K, V, chunk, backward).bytes;
}

// delta_rule_forward_chunked's contract (o written, the chunk-start states saved for backward; g null for
// DeltaNet) as element kernels; launch runs each (HostLaunch on the host, cuda::DeviceLaunch on a stream).
template <class T, class Launch>
void delta_rule_forward_elements(const Launch& launch, void* scratch, T* o, T* states, const T* q, const T* k,
                                 const T* v, const T* beta, const T* g, int Bn, int Tn, int H, int K, int V, T scale,
                                 int chunk) {
  using namespace delta_elements;
  DeltaView<T> w = make_view<T>(scratch, Bn, Tn, H, K, V, scale, chunk, false);
  if (Tn <= 0 || Bn <= 0) return;
  w.q = q, w.k = k, w.v = v, w.beta = beta, w.g = g, w.o = o, w.states = states;
  const size_t bhc = (size_t)Bn * H * w.nch;
  chunk_pieces(launch, w);
  launch(bhc * K * V, TransitionInput<T>{w});
  launch((size_t)Bn * H * V, StatePassing<T>{w, true});
  launch(bhc * w.Lc * V, Updates<T>{w});
  launch((size_t)Bn * Tn * H * V, Output<T>{w});
}

// delta_rule_backward_chunked's contract (dq, dk, dv, dbeta written; dg too unless g and dg are null).
template <class T, class Launch>
void delta_rule_backward_elements(const Launch& launch, void* scratch, T* dq, T* dk, T* dv, T* dbeta, T* dg,
                                  const T* dout, const T* states, const T* q, const T* k, const T* v, const T* beta,
                                  const T* g, int Bn, int Tn, int H, int K, int V, T scale, int chunk) {
  using namespace delta_elements;
  CANONLAB_CHECK((g == nullptr) == (dg == nullptr), "delta_rule: dg must be given exactly when g is");
  DeltaView<T> w = make_view<T>(scratch, Bn, Tn, H, K, V, scale, chunk, true);
  if (Tn <= 0 || Bn <= 0) return;
  w.q = q, w.k = k, w.v = v, w.beta = beta, w.g = g, w.dout = dout;
  w.states = const_cast<T*>(states);  // read only in backward
  w.dq = dq, w.dk = dk, w.dv = dv, w.dbeta = dbeta, w.dg = dg;
  const size_t bhc = (size_t)Bn * H * w.nch, Lc = w.Lc, bh = (size_t)Bn * H;
  chunk_pieces(launch, w);
  launch(bhc * Lc * V, Updates<T>{w});
  launch(bhc * Lc * Lc, OutputScoreGrad<T>{w});
  launch(bhc * Lc * V, OutputUpdateGrad<T>{w});
  launch(bhc * K * V, LocalStateGrad<T>{w});
  launch(bh * V, StatePassing<T>{w, false});
  launch(bhc * Lc * V, UpdateGrad<T>{w});
  launch(bhc * Lc * V, SolveGrad<T>{w});
  launch(bhc * Lc * Lc, CouplingGrad<T>{w});
  launch((size_t)Bn * Tn * H * V, ValueGrad<T>{w});
  launch((size_t)Bn * Tn * H * K, QueryGrad<T>{w});
  launch((size_t)Bn * Tn * H * K, KeyGrad<T>{w});
  launch(bh * Tn, TokenGrads<T>{w});
  if (g) {
    launch(bhc, ChunkCarry<T>{w});
    launch(bh * Tn, GateGrad<T>{w});
  }
}

}  // namespace canonlab
