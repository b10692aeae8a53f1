#pragma once
// GLA (per-key-channel gates) as element kernels (engine/ops/element_kernels.h): the algorithm of the CUDA kernels
// (gla/cuda.cu launches these one thread per element), runnable on the host, where the CPU suite checks it against
// the naive recurrence and the chunked form (tests/unit/test_ops_gla.cpp). The chunk formulas are chunked.h's
// (read its header first); the work is split as:
//
//   forward:  cumsum      G = Σ g per chunk, in double, rounded once          one element per (b, h, chunk, a)
//             scores      A_ij = Σ_a q_ia k_ja e^{G_ia − G_ja}, j <= i          per (b, h, chunk, i, j)
//             local state Σ_j (k_j ⊙ e^{G_L − G_j}) v_jᵀ                        per (b, h, chunk, a, c)
//             passing     the chunk-start states, chunk after chunk            per (b, h, a, c)
//             output      o_i = scale ((q_i ⊙ e^{G_i})ᵀ S0 + Σ_{j<=i} A_ij v_j)  per (b, t, h, c)
//   backward: cumsum, scores (again); the state gradients backwards (local, passing); dA = scale do vᵀ; dq, dk,
//             dv; rowsum(S_end ⊙ dS) per chunk; dg as the reverse sum of q ⊙ dq − k ⊙ dk inside the chunk plus it.
//
// Each score is computed elementwise with the exponent G_ia − G_ja <= 0 taken per channel, so no factor ever grows:
// fla's secondary chunking, which exists to split e^{G_i − G_j} into two bounded GEMM factors, is not needed here
// (it returns with tensor-core GEMMs). Every element sums in a fixed order: the same bits however elements are
// scheduled, no atomics. Scratch: gla_element_scratch_bytes(); nothing is allocated here.
#include <algorithm>
#include <cstddef>

#include "engine/error.h"
#include "engine/ops/element_kernels.h"
#include "engine/ops/gla/naive.h"

namespace canonlab {

// e^x of a log decay x <= 0: as chunked.h's decay_exp, 0 below −80 in float.
CANONLAB_HD inline float gla_decay_factor(float x) { return x < -80.0f ? 0.0f : hd_exp(x); }
CANONLAB_HD inline double gla_decay_factor(double x) { return hd_exp(x); }

// q, k, g, dq, dk, dg: (Bn, Tn, H, K); v, o, dout, dv: (Bn, Tn, H, V); states: (Bn, H, nch, K, V), the state before
// each chunk.
template <class T>
struct GlaView : ChunkGrid {
  int K = 0, V = 0;
  T scale = T(1);
  const T *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *dout = nullptr;
  T *o = nullptr, *states = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr, *dg = nullptr;
  // scratch: G (Bn, Tn, H, K) the in-chunk cumulative gates; A, dA (Bn, H, nch, Lc, Lc); local, dlocal, dstate
  // (Bn, H, nch, K, V), dstate[k] = ∂loss/∂(state after chunk k); carry (Bn, H, nch, K) double
  T *G = nullptr, *A = nullptr, *dA = nullptr, *local = nullptr, *dlocal = nullptr, *dstate = nullptr;
  double* carry = nullptr;

  CANONLAB_HD size_t ik(int b, int t, int h) const { return (((size_t)b * Tn + t) * H + h) * K; }
  CANONLAB_HD size_t iv(int b, int t, int h) const { return (((size_t)b * Tn + t) * H + h) * V; }
  CANONLAB_HD size_t sti(int b, int h, int c) const { return (((size_t)b * H + h) * nch + c) * K * V; }
  CANONLAB_HD size_t mi(int b, int h, int c) const { return (((size_t)b * H + h) * nch + c) * Lc * Lc; }
  // e^{G_ta − G_sa} for tokens t >= s of one chunk
  CANONLAB_HD T decay_between(int b, int h, int t, int s, int a) const {
    return gla_decay_factor(T(G[ik(b, t, h) + a] - G[ik(b, s, h) + a]));
  }
};

namespace gla_elements {

// G_t[a] = Σ_{s ≤ t in its chunk} g_s[a], summed in double and rounded once (chunked.h's chunk_gates).
// One element per (b, h, chunk, a).
template <class T>
struct Cumsum {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int a = int(i % v.K), c = int(i / v.K % v.nch), h = int(i / v.K / v.nch % v.H);
    const int b = int(i / v.K / v.nch / v.H), t0 = c * v.chunk, L = v.length(c);
    double run = 0;
    for (int t = t0; t < t0 + L; t++) {
      run += double(v.g[v.ik(b, t, h) + a]);
      v.G[v.ik(b, t, h) + a] = T(run);
    }
  }
};

// A[i, j] = Σ_a q_ia k_ja e^{G_ia − G_ja} for j <= i, else 0.   One element per (b, h, chunk, i, j).
template <class T>
struct Scores {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const size_t Lc = v.Lc;
    const int j = int(idx % Lc), i = int(idx / Lc % Lc), c = int(idx / (Lc * Lc) % v.nch);
    const int h = int(idx / (Lc * Lc * v.nch) % v.H), b = int(idx / (Lc * Lc * v.nch * v.H)), t0 = c * v.chunk;
    T acc = T(0);
    if (i < v.length(c) && j <= i) {
      const T* qi = v.q + v.ik(b, t0 + i, h);
      const T* kj = v.k + v.ik(b, t0 + j, h);
      for (int a = 0; a < v.K; a++) acc += qi[a] * kj[a] * v.decay_between(b, h, t0 + i, t0 + j, a);
    }
    v.A[idx] = acc;
  }
};

// local[c][a, d] = Σ_j (k_ja e^{G_La − G_ja}) v_jd: what chunk c adds to the state (0 after the last chunk).
// One element per (b, h, chunk, a, d).
template <class T>
struct LocalState {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const size_t KV = (size_t)v.K * v.V;
    const int d = int(idx % v.V), a = int(idx / v.V % v.K), c = int(idx / KV % v.nch);
    const int h = int(idx / KV / v.nch % v.H), b = int(idx / KV / v.nch / v.H);
    T acc = T(0);
    if (c + 1 < v.nch) {
      const int t0 = c * v.chunk, last = t0 + v.length(c) - 1;
      for (int t = t0; t <= last; t++)
        acc += (v.k[v.ik(b, t, h) + a] * v.decay_between(b, h, last, t, a)) * v.v[v.iv(b, t, h) + d];
    }
    v.local[idx] = acc;
  }
};

// e^{G_L} of chunk c for key channel a: how much the chunk decays that row of the state it receives
template <class T>
struct ChunkDecay {
  const GlaView<T>& v;
  int b, h, a;
  CANONLAB_HD T operator()(int c) const { return gla_decay_factor(v.G[v.ik(b, v.last(c), h) + a]); }
};

// forward: states[c] = diag(e^{G_L of chunk c−1}) states[c−1] + local[c−1], states[0] = 0;
// backward: dstate[c] = ∂loss/∂(state after chunk c), 0 after the last chunk, dstate[c−1] = diag(e^{G_L of c})
// dstate[c] + dlocal[c].   One element per (b, h, a, d).
template <class T>
struct StatePassing {
  GlaView<T> v;
  bool forward;
  CANONLAB_HD void operator()(size_t idx) const {
    const size_t KV = (size_t)v.K * v.V, ad = idx % KV;
    const int a = int(ad / v.V), h = int(idx / KV % v.H), b = int(idx / KV / v.H);
    const size_t at = v.sti(b, h, 0) + ad;
    pass_through_chunks(forward ? v.states + at : v.dstate + at, forward ? v.local + at : v.dlocal + at, KV, v.nch,
                        forward, ChunkDecay<T>{v, b, h, a});
  }
};

// o_i[d] = scale (Σ_a (q_ia e^{G_ia}) S0[a, d] + Σ_{j <= i} A_ij v_jd).   One element per (b, t, h, d).
template <class T>
struct Output {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int d = int(idx % v.V), h = int(idx / v.V % v.H), t = int(idx / v.V / v.H % v.Tn);
    const int b = int(idx / v.V / v.H / v.Tn), c = t / v.chunk, t0 = c * v.chunk, i = t - t0;
    T acc = T(0);
    if (c > 0) {
      const T* qi = v.q + v.ik(b, t, h);
      const T* Gi = v.G + v.ik(b, t, h);
      const T* S0 = v.states + v.sti(b, h, c) + d;
      for (int a = 0; a < v.K; a++) acc += (qi[a] * gla_decay_factor(Gi[a])) * S0[(size_t)a * v.V];
    }
    const T* Ai = v.A + v.mi(b, h, c) + (size_t)i * v.Lc;
    for (int j = 0; j <= i; j++) acc += Ai[j] * v.v[v.iv(b, t0 + j, h) + d];
    v.o[idx] = v.scale * acc;
  }
};

// dlocal[c][a, d] = Σ_i (q_ia e^{G_ia}) (scale do_id): what chunk c's outputs send to the state before it (0 for
// the first chunk).   One element per (b, h, chunk, a, d).
template <class T>
struct LocalStateGrad {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const size_t KV = (size_t)v.K * v.V;
    const int d = int(idx % v.V), a = int(idx / v.V % v.K), c = int(idx / KV % v.nch);
    const int h = int(idx / KV / v.nch % v.H), b = int(idx / KV / v.nch / v.H);
    T acc = T(0);
    if (c > 0) {
      const int t0 = c * v.chunk, L = v.length(c);
      for (int t = t0; t < t0 + L; t++)
        acc += (v.q[v.ik(b, t, h) + a] * gla_decay_factor(v.G[v.ik(b, t, h) + a])) * (v.scale * v.dout[v.iv(b, t, h) + d]);
    }
    v.dlocal[idx] = acc;
  }
};

// dA[i, j] = Σ_d (scale do_id) v_jd for j <= i, else 0.   One element per (b, h, chunk, i, j).
template <class T>
struct ScoreGrad {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const size_t Lc = v.Lc;
    const int j = int(idx % Lc), i = int(idx / Lc % Lc), c = int(idx / (Lc * Lc) % v.nch);
    const int h = int(idx / (Lc * Lc * v.nch) % v.H), b = int(idx / (Lc * Lc * v.nch * v.H)), t0 = c * v.chunk;
    T acc = T(0);
    if (i < v.length(c) && j <= i) {
      const T* doi = v.dout + v.iv(b, t0 + i, h);
      const T* vj = v.v + v.iv(b, t0 + j, h);
      for (int d = 0; d < v.V; d++) acc += (v.scale * doi[d]) * vj[d];
    }
    v.dA[idx] = acc;
  }
};

// dq_i[a] = e^{G_ia} Σ_d S0[a, d] (scale do_id) + Σ_{j <= i} dA_ij k_ja e^{G_ia − G_ja}.   One element per
// (b, t, h, a).
template <class T>
struct QueryGrad {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int a = int(idx % v.K), h = int(idx / v.K % v.H), t = int(idx / v.K / v.H % v.Tn);
    const int b = int(idx / v.K / v.H / v.Tn), c = t / v.chunk, t0 = c * v.chunk, i = t - t0;
    T acc = T(0);
    if (c > 0) {
      const T* S0 = v.states + v.sti(b, h, c) + (size_t)a * v.V;
      const T* doi = v.dout + v.iv(b, t, h);
      T inter = T(0);
      for (int d = 0; d < v.V; d++) inter += S0[d] * (v.scale * doi[d]);
      acc = gla_decay_factor(v.G[idx]) * inter;
    }
    const T* dAi = v.dA + v.mi(b, h, c) + (size_t)i * v.Lc;
    for (int j = 0; j <= i; j++) acc += dAi[j] * v.k[v.ik(b, t0 + j, h) + a] * v.decay_between(b, h, t, t0 + j, a);
    v.dq[idx] = acc;
  }
};

// dk_j[a] = e^{G_La − G_ja} Σ_d dS[a, d] v_jd + Σ_{i >= j} dA_ij q_ia e^{G_ia − G_ja}.   One element per (b, t, h, a).
template <class T>
struct KeyGrad {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int a = int(idx % v.K), h = int(idx / v.K % v.H), t = int(idx / v.K / v.H % v.Tn);
    const int b = int(idx / v.K / v.H / v.Tn), c = t / v.chunk, t0 = c * v.chunk, j = t - t0, L = v.length(c);
    T acc = T(0);
    if (c + 1 < v.nch) {
      const T* dS = v.dstate + v.sti(b, h, c) + (size_t)a * v.V;
      const T* vj = v.v + v.iv(b, t, h);
      T inter = T(0);
      for (int d = 0; d < v.V; d++) inter += dS[d] * vj[d];
      acc = v.decay_between(b, h, t0 + L - 1, t, a) * inter;
    }
    const T* dAj = v.dA + v.mi(b, h, c) + j;
    for (int i = j; i < L; i++)
      acc += dAj[(size_t)i * v.Lc] * v.q[v.ik(b, t0 + i, h) + a] * v.decay_between(b, h, t0 + i, t, a);
    v.dk[idx] = acc;
  }
};

// dv_j[d] = Σ_{i >= j} A_ij (scale do_id) + Σ_a dS[a, d] (k_ja e^{G_La − G_ja}).   One element per (b, t, h, d).
template <class T>
struct ValueGrad {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int d = int(idx % v.V), h = int(idx / v.V % v.H), t = int(idx / v.V / v.H % v.Tn);
    const int b = int(idx / v.V / v.H / v.Tn), c = t / v.chunk, t0 = c * v.chunk, j = t - t0, L = v.length(c);
    const T* Aj = v.A + v.mi(b, h, c) + j;
    T acc = T(0);
    for (int i = j; i < L; i++) acc += Aj[(size_t)i * v.Lc] * (v.scale * v.dout[v.iv(b, t0 + i, h) + d]);
    if (c + 1 < v.nch) {
      const T* dS = v.dstate + v.sti(b, h, c) + d;
      const T* kj = v.k + v.ik(b, t, h);
      for (int a = 0; a < v.K; a++)
        acc += dS[(size_t)a * v.V] * (kj[a] * v.decay_between(b, h, t0 + L - 1, t, a));
    }
    v.dv[idx] = acc;
  }
};

// carry[c][a] = Σ_d S_end[a, d] dS[a, d], S_end = states[c + 1]: the part of dg from the tokens after chunk c
// (0 for the last chunk).   One element per (b, h, chunk, a).
template <class T>
struct GateCarry {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int a = int(idx % v.K), c = int(idx / v.K % v.nch), h = int(idx / v.K / v.nch % v.H);
    const int b = int(idx / v.K / v.nch / v.H);
    double s = 0;
    if (c + 1 < v.nch) {
      const T* S_end = v.states + v.sti(b, h, c + 1) + (size_t)a * v.V;
      const T* dS = v.dstate + v.sti(b, h, c) + (size_t)a * v.V;
      for (int d = 0; d < v.V; d++) s += double(S_end[d]) * double(dS[d]);
    }
    v.carry[idx] = s;
  }
};

// dg_i[a] = Σ_{s >= i in the chunk} (q_sa dq_sa − k_sa dk_sa) + carry[a].   One element per (b, t, h, a).
template <class T>
struct GateGrad {
  GlaView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int a = int(idx % v.K), h = int(idx / v.K % v.H), t = int(idx / v.K / v.H % v.Tn);
    const int b = int(idx / v.K / v.H / v.Tn), c = t / v.chunk, last = c * v.chunk + v.length(c) - 1;
    double s = v.carry[(((size_t)b * v.H + h) * v.nch + c) * v.K + a];
    for (int u = last; u >= t; u--) {
      const size_t at = v.ik(b, u, h) + a;
      s += double(v.q[at]) * double(v.dq[at]) - double(v.k[at]) * double(v.dk[at]);
    }
    v.dg[idx] = T(s);
  }
};

// Where each scratch region lies in the one buffer.
struct GlaScratch {
  size_t G, A, dA, local, dlocal, dstate, carry, bytes;
};

template <class T>
GlaScratch gla_scratch_layout(int Bn, int Tn, int H, int K, int V, int chunk, bool backward) {
  const size_t nch = chunk > 0 && Tn > 0 ? (size_t)(Tn + chunk - 1) / chunk : 0;
  const size_t Lc = (size_t)std::max(0, std::min(chunk, Tn)), bh = (size_t)std::max(0, Bn) * H;
  const size_t states = bh * nch * K * V;
  ScratchLayout s;
  GlaScratch o{};
  o.G = s.reserve<T>(bh * std::max(0, Tn) * K);
  o.A = s.reserve<T>(bh * nch * Lc * Lc);
  if (!backward) {
    o.local = s.reserve<T>(states);
  } else {
    o.dA = s.reserve<T>(bh * nch * Lc * Lc);
    o.dlocal = s.reserve<T>(states);
    o.dstate = s.reserve<T>(states);
    o.carry = s.reserve<double>(bh * nch * K);
  }
  o.bytes = s.bytes();
  return o;
}

template <class T>
GlaView<T> make_view(void* scratch, int Bn, int Tn, int H, int K, int V, T scale, int chunk, bool backward) {
  CANONLAB_CHECK(chunk >= 1, "gla: chunk size must be at least 1");
  const GlaScratch at = gla_scratch_layout<T>(Bn, Tn, H, K, V, chunk, backward);
  GlaView<T> v;
  v.set_grid(Bn, Tn, H, chunk);
  v.K = K, v.V = V, v.scale = scale;
  v.G = scratch_at<T>(scratch, at.G);
  v.A = scratch_at<T>(scratch, at.A);
  if (!backward) {
    v.local = scratch_at<T>(scratch, at.local);
  } else {
    v.dA = scratch_at<T>(scratch, at.dA);
    v.dlocal = scratch_at<T>(scratch, at.dlocal);
    v.dstate = scratch_at<T>(scratch, at.dstate);
    v.carry = scratch_at<double>(scratch, at.carry);
  }
  return v;
}

}  // namespace gla_elements

// ---- decoding: one token of Bn sequences (gla_step's arithmetic, in double inside each element) ----

namespace gla_elements {

// state[b, h, a, c] = e^{g_a} state + k_a v_c.   One element per (b, h, a, c).
template <class T>
struct StepState {
  T* state;
  const T *k_t, *v_t, *g_t;
  int H, K, V;
  CANONLAB_HD void operator()(size_t i) const {
    const int c = int(i % V), a = int(i / V % K);
    const size_t bh = i / V / K;
    const double decay = hd_exp(double(g_t[bh * K + a]));
    state[i] = T(decay * double(state[i]) + double(k_t[bh * K + a]) * double(v_t[bh * V + c]));
  }
};

// o[b, h, c] = scale Σ_a q_a state[a, c].   One element per (b, h, c).
template <class T>
struct StepOutput {
  T* o_t;
  const T *state, *q_t;
  int H, K, V;
  T scale;
  CANONLAB_HD void operator()(size_t i) const {
    const int c = int(i % V);
    const size_t bh = i / V;
    const T* s = state + bh * K * V + c;
    double acc = 0;
    for (int a = 0; a < K; a++) acc += double(q_t[bh * K + a]) * double(s[(size_t)a * V]);
    o_t[i] = T(double(scale) * acc);
  }
};

}  // namespace gla_elements

// gla_step for Bn sequences at once: o_t: (Bn, H, V) written; state: (Bn, H, K, V) updated; q_t, k_t, g_t:
// (Bn, H, K); v_t: (Bn, H, V).
template <class T, class Launch>
void gla_step_elements(const Launch& launch, T* o_t, T* state, const T* q_t, const T* k_t, const T* v_t, const T* g_t,
                       int Bn, int H, int K, int V, T scale) {
  launch((size_t)Bn * H * K * V, gla_elements::StepState<T>{state, k_t, v_t, g_t, H, K, V});
  launch((size_t)Bn * H * V, gla_elements::StepOutput<T>{o_t, state, q_t, H, K, V, scale});
}

// Bytes of scratch gla_forward_elements (backward = false) or gla_backward_elements needs.
template <class T>
size_t gla_element_scratch_bytes(int Bn, int Tn, int H, int K, int V, int chunk, bool backward) {
  return gla_elements::gla_scratch_layout<T>(Bn, Tn, H, K, V, chunk, backward).bytes;
}

// gla_forward_chunked's contract (o written, the chunk-start states saved for backward) as element kernels;
// launch runs each (HostLaunch on the host, cuda::DeviceLaunch on a stream).
template <class T, class Launch>
void gla_forward_elements(const Launch& launch, void* scratch, T* o, T* states, const T* q, const T* k, const T* v,
                          const T* g, int Bn, int Tn, int H, int K, int V, T scale, int chunk) {
  using namespace gla_elements;
  GlaView<T> w = make_view<T>(scratch, Bn, Tn, H, K, V, scale, chunk, false);
  if (Tn <= 0 || Bn <= 0) return;
  w.q = q, w.k = k, w.v = v, w.g = g, w.o = o, w.states = states;
  const size_t bh = (size_t)Bn * H, KV = (size_t)K * V, mats = bh * w.nch * w.Lc * w.Lc;
  launch(bh * w.nch * K, Cumsum<T>{w});
  launch(mats, Scores<T>{w});
  launch(bh * w.nch * KV, LocalState<T>{w});
  launch(bh * KV, StatePassing<T>{w, true});
  launch((size_t)Bn * Tn * H * V, Output<T>{w});
}

// gla_backward_chunked's contract (dq, dk, dv, dg written) as element kernels.
template <class T, class Launch>
void gla_backward_elements(const Launch& launch, void* scratch, T* dq, T* dk, T* dv, T* dg, const T* dout,
                           const T* states, const T* q, const T* k, const T* v, const T* g, int Bn, int Tn, int H,
                           int K, int V, T scale, int chunk) {
  using namespace gla_elements;
  GlaView<T> w = make_view<T>(scratch, Bn, Tn, H, K, V, scale, chunk, true);
  if (Tn <= 0 || Bn <= 0) return;
  w.q = q, w.k = k, w.v = v, w.g = g, w.dout = dout;
  w.states = const_cast<T*>(states);  // read only in backward
  w.dq = dq, w.dk = dk, w.dv = dv, w.dg = dg;
  const size_t bh = (size_t)Bn * H, KV = (size_t)K * V, mats = bh * w.nch * w.Lc * w.Lc;
  const size_t keys = (size_t)Bn * Tn * H * K;
  launch(bh * w.nch * K, Cumsum<T>{w});
  launch(mats, Scores<T>{w});
  launch(bh * w.nch * KV, LocalStateGrad<T>{w});
  launch(bh * KV, StatePassing<T>{w, false});
  launch(mats, ScoreGrad<T>{w});
  launch(keys, QueryGrad<T>{w});
  launch(keys, KeyGrad<T>{w});
  launch((size_t)Bn * Tn * H * V, ValueGrad<T>{w});
  launch(bh * w.nch * K, GateCarry<T>{w});
  launch(keys, GateGrad<T>{w});
}

}  // namespace canonlab
