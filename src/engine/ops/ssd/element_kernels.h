#pragma once
// Mamba2's SSD scan as element kernels (engine/ops/element_kernels.h): the algorithm of the CUDA kernels (ssd/cuda.cu
// launches these one thread per element), runnable on the host, where the CPU suite checks it against the naive
// recurrence and the chunked scan (tests/unit/test_ops_ssd.cpp). The chunk formulas are those of
// chunked.h (read its header first); what differs is the order of work, in the phases mamba_ssm's SSD uses:
//
//   forward:  cumsum       cs per chunk, in double                             one element per (b, h, chunk)
//             gram         C Bᵀ per chunk, shared by a group's heads           per (b, g, chunk, r, c)
//             local state  Xᵀ diag(exp(cs_last − cs_c) dt_c) B                 per (b, h, chunk, p, n)
//             passing      the chunk-start states, chunk after chunk           per (b, h, p, n)
//             output       y = M X + diag(exp(cs)) C h_prevᵀ                   per (b, t, h, p)
//   backward: cumsum, gram (again), then the state gradients chunk by chunk backwards (local, passing), dM = dY Xᵀ
//             and Q = dM ∘ M, dG summed over a group's heads, dx, dC, dB, the gate terms and dA.
//
// Each element sums in a fixed order, so the result is the same bits however elements are scheduled; the one
// cross-element reduction (dA over batch and time) is a last kernel of one element per head. The gate gradient
// collects, as in chunked.h, exactly the terms whose decay factor contains a step, never differentiating exp(cs)
// through a cumulative sum. Scratch: ssd_element_scratch_bytes(); nothing is allocated here.
#include <algorithm>
#include <cstddef>

#include "engine/error.h"
#include "engine/ops/element_kernels.h"
#include "engine/ops/ssd/naive.h"

namespace canonlab {

// exp of a log decay x <= 0: as chunked.h's decay_exp, 0 below e^−87 in float (no subnormals in the sums).
CANONLAB_HD inline float ssd_decay_factor(float x) { return x < -87.0f ? 0.0f : hd_exp(x); }
CANONLAB_HD inline double ssd_decay_factor(double x) { return hd_exp(x); }

// Shapes, index arithmetic and every buffer the kernels read or write. x, y, dy, dx: (Bn, Tn, H, P); dt, ddt:
// (Bn, Tn, H); A, dA: (H); Bm, Cm, dB, dC: (Bn, Tn, G, N); states: (Bn, H, nch, P, N), the state before each chunk.
template <class T>
struct SsdView : ChunkGrid {
  int P = 0, G = 0, N = 0, hg = 1;  // hg: heads per group
  const T *x = nullptr, *dt = nullptr, *A = nullptr, *Bm = nullptr, *Cm = nullptr, *dy = nullptr;
  T *y = nullptr, *states = nullptr, *dx = nullptr, *ddt = nullptr, *dA = nullptr, *dB = nullptr, *dC = nullptr;
  // scratch: cs (Bn, H, Tn) double; gram, dGs (Bn, G, nch, Lc, Lc); dM, Q (Bn, H, nch, Lc, Lc); local, dlocal,
  // dstate (Bn, H, nch, P, N), dstate[k] = ∂loss/∂(state after chunk k); s_term, e_term, dadt (Bn, H, Tn) double;
  // hd (Bn, H, nch) double
  double* cs = nullptr;
  T *gram = nullptr, *dGs = nullptr, *dM = nullptr, *Q = nullptr, *local = nullptr, *dlocal = nullptr,
    *dstate = nullptr;
  double *s_term = nullptr, *e_term = nullptr, *dadt = nullptr, *hd = nullptr;

  CANONLAB_HD size_t xi(int b, int t, int h) const { return (((size_t)b * Tn + t) * H + h) * P; }
  CANONLAB_HD size_t dti(int b, int t, int h) const { return ((size_t)b * Tn + t) * H + h; }
  CANONLAB_HD size_t bci(int b, int t, int g) const { return (((size_t)b * Tn + t) * G + g) * N; }
  CANONLAB_HD size_t csi(int b, int h, int t) const { return ((size_t)b * H + h) * Tn + t; }
  CANONLAB_HD size_t sti(int b, int h, int k) const { return (((size_t)b * H + h) * nch + k) * P * N; }
  CANONLAB_HD size_t gri(int b, int g, int k) const { return (((size_t)b * G + g) * nch + k) * Lc * Lc; }
  CANONLAB_HD size_t mi(int b, int h, int k) const { return (((size_t)b * H + h) * nch + k) * Lc * Lc; }
  CANONLAB_HD T dt_at(int b, int t, int h) const { return dt[dti(b, t, h)]; }
  // exp(cs_r − cs_c) for tokens r >= c of one chunk of head h, the exponent taken in double then rounded to T
  CANONLAB_HD T decay_between(int b, int h, int tr, int tc) const {
    return ssd_decay_factor(T(cs[csi(b, h, tr)] - cs[csi(b, h, tc)]));
  }
};

namespace ssd_elements {

// cs[t] = Σ_{j ≤ t in its chunk} dt_j A_h, in double.   One element per (b, h, chunk).
template <class T>
struct Cumsum {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int k = int(i % v.nch), h = int(i / v.nch % v.H), b = int(i / v.nch / v.H);
    const int t0 = k * v.chunk, L = v.length(k);
    const double Ah = double(v.A[h]);
    double run = 0;
    for (int r = 0; r < L; r++) {
      run += double(v.dt_at(b, t0 + r, h)) * Ah;
      v.cs[v.csi(b, h, t0 + r)] = run;
    }
  }
};

// gram[r, c] = C_r · B_c for c <= r in the chunk, else 0.   One element per (b, g, chunk, r, c).
template <class T>
struct Gram {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t Lc = v.Lc;
    const int c = int(i % Lc), r = int(i / Lc % Lc), k = int(i / (Lc * Lc) % v.nch);
    const int g = int(i / (Lc * Lc * v.nch) % v.G), b = int(i / (Lc * Lc * v.nch * v.G));
    const int t0 = k * v.chunk;
    T acc = T(0);
    if (r < v.length(k) && c <= r) {
      const T* Cr = v.Cm + v.bci(b, t0 + r, g);
      const T* Bc = v.Bm + v.bci(b, t0 + c, g);
      for (int n = 0; n < v.N; n++) acc += Cr[n] * Bc[n];
    }
    v.gram[i] = acc;
  }
};

// local[k][p, n] = Σ_c (exp(cs_last − cs_c) dt_c x_c[p]) B_c[n]: what chunk k adds to the state (not needed
// after the last chunk: 0 there).   One element per (b, h, chunk, p, n).
template <class T>
struct LocalState {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t PN = (size_t)v.P * v.N;
    const int n = int(i % v.N), p = int(i / v.N % v.P), k = int(i / PN % v.nch);
    const int h = int(i / PN / v.nch % v.H), b = int(i / PN / v.nch / v.H), g = h / v.hg;
    T acc = T(0);
    if (k + 1 < v.nch) {
      const int t0 = k * v.chunk, last = t0 + v.length(k) - 1;
      for (int t = t0; t <= last; t++) {
        const T w = v.decay_between(b, h, last, t) * v.dt_at(b, t, h);
        acc += (w * v.x[v.xi(b, t, h) + p]) * v.Bm[v.bci(b, t, g) + n];
      }
    }
    v.local[i] = acc;
  }
};

// exp(cs_last) of chunk k for head h: how much the chunk decays the state it receives
template <class T>
struct ChunkDecay {
  const SsdView<T>& v;
  int b, h;
  CANONLAB_HD T operator()(int k) const { return ssd_decay_factor(T(v.cs[v.csi(b, h, v.last(k))])); }
};

// forward: states[k] = exp(cs_last of chunk k−1) states[k−1] + local[k−1], states[0] = 0;
// backward: dstate[k] = ∂loss/∂(state after chunk k), 0 after the last chunk, dstate[k−1] = exp(cs_last of k)
// dstate[k] + dlocal[k].   One element per (b, h, p, n).
template <class T>
struct StatePassing {
  SsdView<T> v;
  bool forward;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t PN = (size_t)v.P * v.N;
    const int h = int(i / PN % v.H), b = int(i / PN / v.H);
    const size_t at = v.sti(b, h, 0) + i % PN;
    pass_through_chunks(forward ? v.states + at : v.dstate + at, forward ? v.local + at : v.dlocal + at, PN, v.nch,
                        forward, ChunkDecay<T>{v, b, h});
  }
};

// y_t[p] = exp(cs_t) C_t · h_prev[p, :] + Σ_{c ≤ t} (gram[t, c] exp(cs_t − cs_c) dt_c) x_c[p].
// One element per (b, t, h, p).
template <class T>
struct Output {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int p = int(i % v.P), h = int(i / v.P % v.H), t = int(i / v.P / v.H % v.Tn), b = int(i / v.P / v.H / v.Tn);
    const int g = h / v.hg, k = t / v.chunk, t0 = k * v.chunk, r = t - t0;
    T acc = T(0);
    if (k > 0) {
      const T* hp = v.states + v.sti(b, h, k) + (size_t)p * v.N;
      const T* Ct = v.Cm + v.bci(b, t, g);
      T inter = T(0);
      for (int n = 0; n < v.N; n++) inter += Ct[n] * hp[n];
      acc = inter * ssd_decay_factor(T(v.cs[v.csi(b, h, t)]));
    }
    const T* gram_row = v.gram + v.gri(b, g, k) + (size_t)r * v.Lc;
    for (int c = 0; c <= r; c++)
      acc += (gram_row[c] * v.decay_between(b, h, t, t0 + c) * v.dt_at(b, t0 + c, h)) * v.x[v.xi(b, t0 + c, h) + p];
    v.y[i] = acc;
  }
};

// dlocal[k][p, n] = Σ_r (exp(cs_r) dy_r[p]) C_r[n]: what chunk k's outputs send to the state before it (0 for the
// first chunk, whose incoming state is 0).   One element per (b, h, chunk, p, n).
template <class T>
struct LocalStateGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t PN = (size_t)v.P * v.N;
    const int n = int(i % v.N), p = int(i / v.N % v.P), k = int(i / PN % v.nch);
    const int h = int(i / PN / v.nch % v.H), b = int(i / PN / v.nch / v.H), g = h / v.hg;
    T acc = T(0);
    if (k > 0) {
      const int t0 = k * v.chunk, L = v.length(k);
      for (int t = t0; t < t0 + L; t++) {
        const T e = ssd_decay_factor(T(v.cs[v.csi(b, h, t)]));
        acc += (e * v.dy[v.xi(b, t, h) + p]) * v.Cm[v.bci(b, t, g) + n];
      }
    }
    v.dlocal[i] = acc;
  }
};

// dM[r, c] = dy_r · x_c and Q[r, c] = dM ∘ M = dM (gram exp(cs_r − cs_c)) dt_c, for c <= r, else 0.
// One element per (b, h, chunk, r, c).
template <class T>
struct ScoreGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t Lc = v.Lc;
    const int c = int(i % Lc), r = int(i / Lc % Lc), k = int(i / (Lc * Lc) % v.nch);
    const int h = int(i / (Lc * Lc * v.nch) % v.H), b = int(i / (Lc * Lc * v.nch * v.H)), g = h / v.hg;
    const int t0 = k * v.chunk;
    T dm = T(0), q = T(0);
    if (r < v.length(k) && c <= r) {
      const T* dyr = v.dy + v.xi(b, t0 + r, h);
      const T* xc = v.x + v.xi(b, t0 + c, h);
      for (int p = 0; p < v.P; p++) dm += dyr[p] * xc[p];
      const T gd = v.gram[v.gri(b, g, k) + (size_t)r * Lc + c] * v.decay_between(b, h, t0 + r, t0 + c);
      q = (dm * gd) * v.dt_at(b, t0 + c, h);
    }
    v.dM[i] = dm;
    v.Q[i] = q;
  }
};

// dGs[r, c] = Σ_{heads of g, in order} dM[r, c] exp(cs_r − cs_c) dt_c: the gradient of C Bᵀ.
// One element per (b, g, chunk, r, c).
template <class T>
struct GramGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t Lc = v.Lc, rc = i % (Lc * Lc);
    const int c = int(i % Lc), r = int(i / Lc % Lc), k = int(i / (Lc * Lc) % v.nch);
    const int g = int(i / (Lc * Lc * v.nch) % v.G), b = int(i / (Lc * Lc * v.nch * v.G));
    const int t0 = k * v.chunk;
    T acc = T(0);
    if (r < v.length(k) && c <= r)
      for (int h = g * v.hg; h < (g + 1) * v.hg; h++)
        acc += v.dM[v.mi(b, h, k) + rc] * v.decay_between(b, h, t0 + r, t0 + c) * v.dt_at(b, t0 + c, h);
    v.dGs[i] = acc;
  }
};

// dx_c[p] = Σ_{r ≥ c} M[r, c] dy_r[p] + exp(cs_last − cs_c) dt_c (dstate[p, :] · B_c).   One element per
// (b, t, h, p).
template <class T>
struct InputGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int p = int(i % v.P), h = int(i / v.P % v.H), t = int(i / v.P / v.H % v.Tn), b = int(i / v.P / v.H / v.Tn);
    const int g = h / v.hg, k = t / v.chunk, t0 = k * v.chunk, c = t - t0, L = v.length(k);
    const T dtc = v.dt_at(b, t, h);
    const T* gram_col = v.gram + v.gri(b, g, k) + c;
    T acc = T(0);
    for (int r = c; r < L; r++)
      acc += (gram_col[(size_t)r * v.Lc] * v.decay_between(b, h, t0 + r, t) * dtc) * v.dy[v.xi(b, t0 + r, h) + p];
    if (k + 1 < v.nch) {
      const T* dh = v.dstate + v.sti(b, h, k) + (size_t)p * v.N;
      const T* Bc = v.Bm + v.bci(b, t, g);
      T z = T(0);
      for (int n = 0; n < v.N; n++) z += Bc[n] * dh[n];
      acc += (v.decay_between(b, h, t0 + L - 1, t) * dtc) * z;
    }
    v.dx[i] = acc;
  }
};

// dC_r[n] = Σ_{c ≤ r} dGs[r, c] B_c[n] + Σ_{heads of g} Σ_p (exp(cs_r) dy_r[p]) h_prev[p, n].
// One element per (b, t, g, n).
template <class T>
struct CGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int n = int(i % v.N), g = int(i / v.N % v.G), t = int(i / v.N / v.G % v.Tn), b = int(i / v.N / v.G / v.Tn);
    const int k = t / v.chunk, t0 = k * v.chunk, r = t - t0;
    const T* dg_row = v.dGs + v.gri(b, g, k) + (size_t)r * v.Lc;
    T acc = T(0);
    for (int c = 0; c <= r; c++) acc += dg_row[c] * v.Bm[v.bci(b, t0 + c, g) + n];
    if (k > 0)
      for (int h = g * v.hg; h < (g + 1) * v.hg; h++) {
        const T e = ssd_decay_factor(T(v.cs[v.csi(b, h, t)]));
        const T* dyr = v.dy + v.xi(b, t, h);
        const T* hp = v.states + v.sti(b, h, k) + n;
        for (int p = 0; p < v.P; p++) acc += (e * dyr[p]) * hp[(size_t)p * v.N];
      }
    v.dC[i] = acc;
  }
};

// dB_c[n] = Σ_{r ≥ c} dGs[r, c] C_r[n] + Σ_{heads of g} Σ_p (exp(cs_last − cs_c) dt_c x_c[p]) dstate[p, n].
// One element per (b, t, g, n).
template <class T>
struct BGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int n = int(i % v.N), g = int(i / v.N % v.G), t = int(i / v.N / v.G % v.Tn), b = int(i / v.N / v.G / v.Tn);
    const int k = t / v.chunk, t0 = k * v.chunk, c = t - t0, L = v.length(k);
    const T* dg_col = v.dGs + v.gri(b, g, k) + c;
    T acc = T(0);
    for (int r = c; r < L; r++) acc += dg_col[(size_t)r * v.Lc] * v.Cm[v.bci(b, t0 + r, g) + n];
    if (k + 1 < v.nch)
      for (int h = g * v.hg; h < (g + 1) * v.hg; h++) {
        const T w = v.decay_between(b, h, t0 + L - 1, t) * v.dt_at(b, t, h);
        const T* xc = v.x + v.xi(b, t, h);
        const T* dh = v.dstate + v.sti(b, h, k) + n;
        for (int p = 0; p < v.P; p++) acc += (w * xc[p]) * dh[(size_t)p * v.N];
      }
    v.dB[i] = acc;
  }
};

// Per token, the two state terms of the gate gradient: s_c = x_c · (dstate B_c) (through the state after the chunk)
// and e_r = exp(cs_r) dy_r · (h_prev C_r) (through the incoming state).   One element per (b, h, t).
template <class T>
struct GateStateTerms {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int t = int(i % v.Tn), h = int(i / v.Tn % v.H), b = int(i / v.Tn / v.H);
    const int g = h / v.hg, k = t / v.chunk;
    const T* Bt = v.Bm + v.bci(b, t, g);
    const T* Ct = v.Cm + v.bci(b, t, g);
    double s = 0, e = 0;
    if (k + 1 < v.nch) {
      const T* xt = v.x + v.xi(b, t, h);
      T dot = T(0);
      for (int p = 0; p < v.P; p++) {
        const T* dh = v.dstate + v.sti(b, h, k) + (size_t)p * v.N;
        T z = T(0);
        for (int n = 0; n < v.N; n++) z += Bt[n] * dh[n];
        dot += xt[p] * z;
      }
      s = double(dot);
    }
    if (k > 0) {
      const T decay = ssd_decay_factor(T(v.cs[i]));
      const T* dyt = v.dy + v.xi(b, t, h);
      T dot = T(0);
      for (int p = 0; p < v.P; p++) {
        const T* hp = v.states + v.sti(b, h, k) + (size_t)p * v.N;
        T z = T(0);
        for (int n = 0; n < v.N; n++) z += hp[n] * Ct[n];
        dot += (decay * dyt[p]) * z;
      }
      e = double(dot);
    }
    v.s_term[i] = s;
    v.e_term[i] = e;
  }
};

// hd[k] = exp(cs_last) <dstate[k], states[k]>: the incoming state's decay contains every step of the chunk
// (0 in the first and last chunks).   One element per (b, h, chunk).
template <class T>
struct GateCarry {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int k = int(i % v.nch), h = int(i / v.nch % v.H), b = int(i / v.nch / v.H);
    double hd = 0;
    if (k > 0 && k + 1 < v.nch) {
      const size_t PN = (size_t)v.P * v.N;
      const T* dh = v.dstate + v.sti(b, h, k);
      const T* hp = v.states + v.sti(b, h, k);
      T dot = T(0);
      for (size_t j = 0; j < PN; j++) dot += dh[j] * hp[j];
      const int last = k * v.chunk + v.length(k) - 1;
      hd = double(ssd_decay_factor(T(v.cs[v.csi(b, h, last)]))) * double(dot);
    }
    v.hd[i] = hd;
  }
};

// ddt_i = (direct input-scale terms) + A da_i, with da_i the gradient of decay step i (chunked.h's header);
// dadt_i = dt_i da_i, summed into dA by the last kernel.   One element per (b, h, t).
template <class T>
struct Gate {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t idx) const {
    const int t = int(idx % v.Tn), h = int(idx / v.Tn % v.H), b = int(idx / v.Tn / v.H);
    const int g = h / v.hg, k = t / v.chunk, t0 = k * v.chunk, i = t - t0, L = v.length(k), last = t0 + L - 1;
    const bool has_prev = k > 0, has_next = k + 1 < v.nch;
    const size_t m0 = v.mi(b, h, k), Lc = v.Lc;
    const T* gram = v.gram + v.gri(b, g, k);
    const size_t row0 = v.csi(b, h, t0);  // token t0 of this (b, h) in cs, s_term, e_term
    // direct: Σ_{r ≥ i} dM[r, i] gram[r, i] exp(cs_r − cs_i) + exp(cs_last − cs_i) s_i
    T direct = T(0);
    for (int r = i; r < L; r++) direct += v.dM[m0 + r * Lc + i] * (gram[r * Lc + i] * v.decay_between(b, h, t0 + r, t));
    if (has_next) direct += T(double(v.decay_between(b, h, last, t)) * v.s_term[row0 + i]);
    // intra: Σ_{r ≥ i} Σ_{c < i} Q[r, c]
    T intra = T(0);
    for (int c = 0; c < i; c++) {
      T col = T(0);
      for (int r = L - 1; r >= i; r--) col += v.Q[m0 + r * Lc + c];
      intra += col;
    }
    double da = double(intra);
    if (has_next) {  // Σ_{c < i} exp(cs_last − cs_c) dt_c s_c, and the incoming state's share
      double run = 0;
      for (int c = 0; c < i; c++)
        run += double(v.decay_between(b, h, last, t0 + c) * v.dt_at(b, t0 + c, h)) * v.s_term[row0 + c];
      da += run;
      if (has_prev) da += v.hd[((size_t)b * v.H + h) * v.nch + k];
    }
    if (has_prev) {  // Σ_{r ≥ i} e_r
      double run = 0;
      for (int r = L - 1; r >= i; r--) run += v.e_term[row0 + r];
      da += run;
    }
    v.ddt[v.dti(b, t, h)] = T(double(direct) + double(v.A[h]) * da);
    v.dadt[idx] = double(v.dt_at(b, t, h)) * da;
  }
};

// dA_h = Σ_b Σ_t dt da, in (b, t) order.   One element per head.
template <class T>
struct DecayRateGrad {
  SsdView<T> v;
  CANONLAB_HD void operator()(size_t h) const {
    double s = 0;
    for (int b = 0; b < v.Bn; b++)
      for (int t = 0; t < v.Tn; t++) s += v.dadt[v.csi(b, int(h), t)];
    v.dA[h] = T(s);
  }
};

template <class T>
struct ZeroDecayRateGrad {
  T* dA;
  CANONLAB_HD void operator()(size_t h) const { dA[h] = T(0); }
};

// Where each scratch region lies in the one buffer.
struct SsdScratch {
  size_t cs, gram, local, dlocal, dstate, dM, Q, dGs, s_term, e_term, dadt, hd, bytes;
};

template <class T>
SsdScratch ssd_scratch_layout(int Bn, int Tn, int H, int P, int G, int N, int chunk, bool backward) {
  const size_t nch = chunk > 0 && Tn > 0 ? (size_t)(Tn + chunk - 1) / chunk : 0;
  const size_t Lc = (size_t)std::max(0, std::min(chunk, Tn)), tokens = (size_t)std::max(0, Bn) * H * std::max(0, Tn);
  const size_t chunk_mats = (size_t)std::max(0, Bn) * nch * Lc * Lc, states = ssd_states_size(Bn, Tn, H, P, N, chunk);
  ScratchLayout s;
  SsdScratch o{};
  o.cs = s.reserve<double>(tokens);
  o.gram = s.reserve<T>(chunk_mats * G);
  if (!backward) {
    o.local = s.reserve<T>(states);
  } else {
    o.dlocal = s.reserve<T>(states);
    o.dstate = s.reserve<T>(states);
    o.dM = s.reserve<T>(chunk_mats * H);
    o.Q = s.reserve<T>(chunk_mats * H);
    o.dGs = s.reserve<T>(chunk_mats * G);
    o.s_term = s.reserve<double>(tokens);
    o.e_term = s.reserve<double>(tokens);
    o.dadt = s.reserve<double>(tokens);
    o.hd = s.reserve<double>((size_t)std::max(0, Bn) * H * nch);
  }
  o.bytes = s.bytes();
  return o;
}

template <class T>
SsdView<T> make_view(void* scratch, const SsdScratch& at, int Bn, int Tn, int H, int P, int G, int N, int chunk,
                     bool backward) {
  ssd_detail::check_shapes(H, G);
  CANONLAB_CHECK(chunk >= 1, "ssd: chunk size must be at least 1");
  SsdView<T> v;
  v.set_grid(Bn, Tn, H, chunk);
  v.P = P, v.G = G, v.N = N, v.hg = H / G;
  v.cs = scratch_at<double>(scratch, at.cs);
  v.gram = scratch_at<T>(scratch, at.gram);
  if (!backward) {
    v.local = scratch_at<T>(scratch, at.local);
  } else {
    v.dlocal = scratch_at<T>(scratch, at.dlocal);
    v.dstate = scratch_at<T>(scratch, at.dstate);
    v.dM = scratch_at<T>(scratch, at.dM);
    v.Q = scratch_at<T>(scratch, at.Q);
    v.dGs = scratch_at<T>(scratch, at.dGs);
    v.s_term = scratch_at<double>(scratch, at.s_term);
    v.e_term = scratch_at<double>(scratch, at.e_term);
    v.dadt = scratch_at<double>(scratch, at.dadt);
    v.hd = scratch_at<double>(scratch, at.hd);
  }
  return v;
}

}  // namespace ssd_elements

// ---- decoding: one token of Bn sequences (ssd_step's arithmetic, in double inside each element) ----

namespace ssd_elements {

// state[b, h, p, n] = exp(dt A_h) state + dt x[p] B[n].   One element per (b, h, p, n).
template <class T>
struct StepState {
  T* state;
  const T *x_t, *dt_t, *A, *B_t;
  int H, P, G, N;
  CANONLAB_HD void operator()(size_t i) const {
    const int n = int(i % N), p = int(i / N % P), h = int(i / N / P % H), b = int(i / N / P / H), g = h / (H / G);
    const double dt = double(dt_t[(size_t)b * H + h]), a = hd_exp(dt * double(A[h]));
    const double dtx = dt * double(x_t[((size_t)b * H + h) * P + p]);
    state[i] = T(a * double(state[i]) + dtx * double(B_t[((size_t)b * G + g) * N + n]));
  }
};

// y[b, h, p] = state[b, h, p, :] · C.   One element per (b, h, p).
template <class T>
struct StepOutput {
  T* y_t;
  const T *state, *C_t;
  int H, P, G, N;
  CANONLAB_HD void operator()(size_t i) const {
    const int h = int(i / P % H), b = int(i / P / H), g = h / (H / G);
    const T* s = state + i * N;
    const T* C = C_t + ((size_t)b * G + g) * N;
    double acc = 0;
    for (int n = 0; n < N; n++) acc += double(s[n]) * double(C[n]);
    y_t[i] = T(acc);
  }
};

}  // namespace ssd_elements

// ssd_step for Bn sequences at once: y_t: (Bn, H, P) written; state: (Bn, H, P, N) updated; x_t: (Bn, H, P);
// dt_t: (Bn, H); A: (H); B_t, C_t: (Bn, G, N).
template <class T, class Launch>
void ssd_step_elements(const Launch& launch, T* y_t, T* state, const T* x_t, const T* dt_t, const T* A, const T* B_t,
                       const T* C_t, int Bn, int H, int P, int G, int N) {
  ssd_detail::check_shapes(H, G);
  launch((size_t)Bn * H * P * N, ssd_elements::StepState<T>{state, x_t, dt_t, A, B_t, H, P, G, N});
  launch((size_t)Bn * H * P, ssd_elements::StepOutput<T>{y_t, state, C_t, H, P, G, N});
}

// Bytes of scratch ssd_forward_elements (backward = false) or ssd_backward_elements needs.
template <class T>
size_t ssd_element_scratch_bytes(int Bn, int Tn, int H, int P, int G, int N, int chunk, bool backward) {
  return ssd_elements::ssd_scratch_layout<T>(Bn, Tn, H, P, G, N, chunk, backward).bytes;
}

// ssd_forward_chunked's contract (y written, states saved for backward) as element kernels; launch runs each
// (HostLaunch on the host, cuda::DeviceLaunch on a stream); scratch: ssd_element_scratch_bytes(..., false).
template <class T, class Launch>
void ssd_forward_elements(const Launch& launch, void* scratch, T* y, T* states, const T* x, const T* dt, const T* A,
                          const T* Bm, const T* Cm, int Bn, int Tn, int H, int P, int G, int N, int chunk) {
  using namespace ssd_elements;
  const SsdScratch at = ssd_scratch_layout<T>(Bn, Tn, H, P, G, N, chunk, false);
  SsdView<T> v = make_view<T>(scratch, at, Bn, Tn, H, P, G, N, chunk, false);
  if (Tn <= 0 || Bn <= 0) return;
  v.x = x, v.dt = dt, v.A = A, v.Bm = Bm, v.Cm = Cm, v.y = y, v.states = states;
  const size_t bh = (size_t)Bn * H, chunk_mat = (size_t)v.nch * v.Lc * v.Lc, PN = (size_t)P * N;
  launch(bh * v.nch, Cumsum<T>{v});
  launch((size_t)Bn * G * chunk_mat, Gram<T>{v});
  launch(bh * v.nch * PN, LocalState<T>{v});
  launch(bh * PN, StatePassing<T>{v, true});
  launch((size_t)Bn * Tn * H * P, Output<T>{v});
}

// ssd_backward_chunked's contract (every gradient written, dA summed over batch and time) as element kernels;
// scratch: ssd_element_scratch_bytes(..., true).
template <class T, class Launch>
void ssd_backward_elements(const Launch& launch, void* scratch, T* dx, T* ddt, T* dA, T* dB, T* dC, const T* dy,
                           const T* states, const T* x, const T* dt, const T* A, const T* Bm, const T* Cm, int Bn,
                           int Tn, int H, int P, int G, int N, int chunk) {
  using namespace ssd_elements;
  const SsdScratch at = ssd_scratch_layout<T>(Bn, Tn, H, P, G, N, chunk, true);
  SsdView<T> v = make_view<T>(scratch, at, Bn, Tn, H, P, G, N, chunk, true);
  if (Tn <= 0 || Bn <= 0) {
    launch((size_t)H, ZeroDecayRateGrad<T>{dA});
    return;
  }
  v.x = x, v.dt = dt, v.A = A, v.Bm = Bm, v.Cm = Cm, v.dy = dy;
  v.states = const_cast<T*>(states);  // read only in backward
  v.dx = dx, v.ddt = ddt, v.dA = dA, v.dB = dB, v.dC = dC;
  const size_t bh = (size_t)Bn * H, chunk_mat = (size_t)v.nch * v.Lc * v.Lc, PN = (size_t)P * N;
  const size_t tokens_g = (size_t)Bn * Tn * G * N;
  launch(bh * v.nch, Cumsum<T>{v});
  launch((size_t)Bn * G * chunk_mat, Gram<T>{v});
  launch(bh * v.nch * PN, LocalStateGrad<T>{v});
  launch(bh * PN, StatePassing<T>{v, false});
  launch(bh * chunk_mat, ScoreGrad<T>{v});
  launch((size_t)Bn * G * chunk_mat, GramGrad<T>{v});
  launch((size_t)Bn * Tn * H * P, InputGrad<T>{v});
  launch(tokens_g, CGrad<T>{v});
  launch(tokens_g, BGrad<T>{v});
  launch(bh * Tn, GateStateTerms<T>{v});
  launch(bh * v.nch, GateCarry<T>{v});
  launch(bh * Tn, Gate<T>{v});
  launch((size_t)H, DecayRateGrad<T>{v});
}

}  // namespace canonlab
