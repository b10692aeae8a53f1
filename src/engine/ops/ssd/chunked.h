#pragma once
// Mamba2 SSD scan in chunk form (reference §1.6, "chunk formula in explicit form"), threaded over
// (batch, group) pairs; each pair runs its chunks in order, the group's heads inside each chunk, with
// single-threaded GEMMs.
//
// One chunk of L tokens (local positions r, c = 0..L−1), head h with scalar A, incoming state h_prev: (P, N):
//   cs_r   = Σ_{j≤r} dt_j A                          (cumulative log decay, in double, non-increasing)
//   M_rc   = (C_r · B_c) · exp(cs_r − cs_c) · dt_c     for c ≤ r, else 0            (L, L)
//   Y      = M X + diag(exp(cs)) C h_prevᵀ                                          (L, P)
//   h_next = exp(cs_{L−1}) h_prev + Xᵀ diag(exp(cs_{L−1} − cs_c) dt_c) B            (P, N)
// Every exponent is a difference cs_r − cs_c with c ≤ r (or cs_r itself), so it is <= 0: nothing overflows,
// however strongly the gate decays (a cumulative −1000 within a chunk just underflows towards 0), and the
// decay matrix is L × L because the decay is one scalar per head.
//
// Forward saves the state at each chunk start in `states`; backward walks the chunks in reverse carrying
// dh = ∂loss/∂h_next; inside each chunk it recomputes M and starts from the saved chunk-start state. The gate gradient
// never differentiates exp(cs) through a cumulative sum and back (which would subtract large, nearly equal reverse
// cumsums); instead decay step j (a_j = dt_j A) collects exactly the terms whose decay factor contains it:
//   intra:   exp(cs_r − cs_c) contains a_j iff c < j <= r  →  da_j += Σ_{r≥j} Σ_{c<j} Q_rc,
//            Q_rc = dM_rc · M_rc, dM = dY Xᵀ
//   inter:   exp(cs_r) contains every a_j with j <= r       →  da_j += Σ_{r≥j} dy_r · (exp(cs_r) h_prev C_r)
//   h_next:  exp(cs_{L−1} − cs_c) contains a_j iff c < j    →  da_j += Σ_{c<j} w_c · x_cᵀ dh B_c
//            exp(cs_{L−1}) contains every a_j              →  da_j += exp(cs_{L−1}) <dh, h_prev>
// and then ddt_j = (direct input-scale term) + A · da_j, dA += dt_j · da_j.
//
// Determinism: each (b, g) is computed the same way whatever the thread count. dA (summed over the batch) goes
// through per-(b, h) partials summed in a fixed order; dB/dC (summed over the heads of a group) are accumulated
// by the one thread that owns the (b, g) pair, in head order.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/blas.h"
#include "engine/error.h"
#include "engine/ops/ssd/naive.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace ssd_detail {

// dtc[r] = dt of local token r (dt points at the chunk's first token of this head, rows of stride H);
// cs[r] = Σ_{j≤r} dt_j A in double, so differences of large cumulative decays stay accurate.
template <class T>
void chunk_log_decay(double* cs, T* dtc, const T* dt, int H, int L, double A) {
  double run = 0;
  for (int r = 0; r < L; r++) {
    dtc[r] = dt[(size_t)r * H];
    run += double(dtc[r]) * A;
    cs[r] = run;
  }
}

// exp(x) of a log decay x <= 0. vec_exp saturates at e^−87 ≈ 1.6e−38 in float; a decay that strong is 0 to
// float precision next to anything it is added to, and returning 0 keeps subnormals out of the GEMMs.
inline float decay_exp(float x) { return x < -87.0f ? 0.0f : vec_exp(x); }
inline double decay_exp(double x) { return std::exp(x); }

// out[r] = exp(cs_r): the decay from the chunk start to position r
template <class T>
void decay_from_start(T* out, const double* cs, int L) {
  for (int r = 0; r < L; r++) out[r] = T(cs[r]);
  for (int r = 0; r < L; r++) out[r] = decay_exp(out[r]);
}

// row r of the decay matrix: out[c] = exp(cs_r − cs_c) for c <= r (exponent <= 0). The differences are taken
// in double, then exponentiated in T by a separate plain loop, the shape in which vec_exp vectorises.
template <class T>
void decay_row(T* out, const double* cs, int r) {
  const double csr = cs[r];
  for (int c = 0; c <= r; c++) out[c] = T(csr - cs[c]);
  for (int c = 0; c <= r; c++) out[c] = decay_exp(out[c]);
}

}  // namespace ssd_detail

// y, x: (Bn, Tn, H, P); dt: (Bn, Tn, H) (> 0); A: (H) (< 0); Bm, Cm: (Bn, Tn, G, N), head h uses group
// h / (H/G); states: ssd_states_size(Bn, Tn, H, P, N, chunk) elements, (Bn, H, nchunks, P, N), the state
// before each chunk (written, read by backward). chunk >= 1; Tn need not be a multiple of it.
//
// Threaded over (batch, group): the hg = H/G heads of a group share B and C, so per chunk C Bᵀ is formed once
// for all of them, and the products with the state run once for the group on the heads' columns side by side:
// a group's x and y rows are (L, hg·P) blocks (heads adjacent, stride H·P), its states one (hg·P, N) matrix.
template <class T>
void ssd_forward_chunked(T* y, T* states, const T* x, const T* dt, const T* A, const T* Bm, const T* Cm, int Bn, int Tn,
                         int H, int P, int G, int N, int chunk) {
  ssd_detail::check_shapes(H, G);
  CANONLAB_CHECK(chunk >= 1, "ssd: chunk size must be at least 1");
  if (Tn <= 0 || Bn <= 0) return;
  const int hg = H / G, nch = (Tn + chunk - 1) / chunk, HP = H * P, GN = G * N, gP = hg * P;
  const int Lmax = std::min(chunk, Tn);
  const size_t PN = (size_t)P * N;
#pragma omp parallel
  {
    std::vector<double> cs(Lmax);
    std::vector<T> dtc(Lmax), decay(Lmax), Gm((size_t)Lmax * Lmax), M((size_t)Lmax * Lmax);
    std::vector<T> Xw((size_t)Lmax * gP), hs((size_t)hg * PN);  // hs: the group's running states (hg·P, N)
#pragma omp for schedule(static)
    for (int bg = 0; bg < Bn * G; bg++) {
      const int b = bg / G, g = bg % G, h0 = g * hg;
      std::fill(hs.begin(), hs.end(), T(0));
      for (int k = 0; k < nch; k++) {
        const int t0 = k * chunk, L = std::min(chunk, Tn - t0);
        const bool has_prev = k > 0, has_next = k + 1 < nch;
        const size_t bt0 = (size_t)b * Tn + t0;
        const T* Xg = x + (bt0 * H + h0) * P;  // (L, hg·P) rows of stride HP
        T* Yg = y + (bt0 * H + h0) * P;        // (L, hg·P) rows of stride HP
        const T* Bc = Bm + (bt0 * G + g) * N;  // (L, N) rows of stride GN
        const T* Cc = Cm + (bt0 * G + g) * N;  // (L, N) rows of stride GN
        // Gm = C Bᵀ, the same for every head of the group
        gemm(false, true, L, L, N, T(1), Cc, GN, Bc, GN, T(0), Gm.data(), L);
        // inter-chunk, before the decay: Y = C h_prevᵀ for all the group's heads at once (h_prev = 0 in chunk 0)
        if (has_prev) gemm(false, true, L, gP, N, T(1), Cc, GN, hs.data(), N, T(0), Yg, HP);
        for (int j = 0; j < hg; j++) {
          const int h = h0 + j;
          const T* X = Xg + (size_t)j * P;  // (L, P) rows of stride HP
          T* Y = Yg + (size_t)j * P;        // (L, P) rows of stride HP
          T* hj = hs.data() + j * PN;       // (P, N)
          std::copy(hj, hj + PN, states + (((size_t)b * H + h) * nch + k) * PN);
          ssd_detail::chunk_log_decay(cs.data(), dtc.data(), dt + bt0 * H + h, H, L, double(A[h]));
          // Y = diag(exp(cs)) C h_prevᵀ: the incoming state decayed to each position
          if (has_prev) {
            ssd_detail::decay_from_start(decay.data(), cs.data(), L);
            for (int r = 0; r < L; r++)
              for (int p = 0; p < P; p++) Y[(size_t)r * HP + p] *= decay[r];
          }
          // M = Gm ∘ exp(cs_r − cs_c) ∘ dt_c on and below the diagonal, zero above
          for (int r = 0; r < L; r++) {
            T* m = M.data() + (size_t)r * L;
            const T* gm = Gm.data() + (size_t)r * L;
            ssd_detail::decay_row(decay.data(), cs.data(), r);
            for (int c = 0; c <= r; c++) m[c] = gm[c] * decay[c] * dtc[c];
            for (int c = r + 1; c < L; c++) m[c] = T(0);
          }
          // Y += M X (intra-chunk)
          gemm(false, false, L, P, L, T(1), M.data(), L, X, HP, has_prev ? T(1) : T(0), Y, HP);
          // h_next = exp(cs_last) h_prev + Xᵀ diag(exp(cs_last − cs_c) dt_c) B: the decay and diag(w) X here,
          // the product for the whole group below (not needed after the last chunk)
          if (has_next) {
            ssd_detail::decay_row(decay.data(), cs.data(), L - 1);  // exp(cs_last − cs_c)
            for (int c = 0; c < L; c++) {
              const T w = decay[c] * dtc[c];
              const T* xc = X + (size_t)c * HP;
              T* xw = Xw.data() + (size_t)c * gP + (size_t)j * P;
              for (int p = 0; p < P; p++) xw[p] = w * xc[p];
            }
            const T el = ssd_detail::decay_exp(T(cs[L - 1]));
            for (size_t i = 0; i < PN; i++) hj[i] *= el;
          }
        }
        // states (hg·P, N) += (diag(w) X)ᵀ B for all the group's heads
        if (has_next) gemm(true, false, gP, N, L, T(1), Xw.data(), gP, Bc, GN, T(1), hs.data(), N);
      }
    }
  }
}

// All gradients written: dx: (Bn, Tn, H, P); ddt: (Bn, Tn, H); dA: (H) summed over batch and time;
// dB, dC: (Bn, Tn, G, N) summed over the heads of each group. dy: (Bn, Tn, H, P); states from
// ssd_forward_chunked with the same chunk; the rest as in forward.
//
// Threaded over (batch, group) like the forward, walking the chunks in reverse with the group's heads inside
// each chunk, in head order. The heads share B and C, so their contributions to dB and dC that are products
// with B or C are summed before the product: Σ_h dG_h B = (Σ_h dG_h) B, Σ_h dG_hᵀ C = (Σ_h dG_h)ᵀ C, and the
// state terms run as one GEMM over the heads' columns side by side. One thread owns each (b, g)'s dB/dC rows,
// so the sums over heads need no partial buffers and are taken in the same order whatever the thread count.
template <class T>
void ssd_backward_chunked(T* dx, T* ddt, T* dA, T* dB, T* dC, const T* dy, const T* states, const T* x, const T* dt,
                          const T* A, const T* Bm, const T* Cm, int Bn, int Tn, int H, int P, int G, int N, int chunk) {
  ssd_detail::check_shapes(H, G);
  CANONLAB_CHECK(chunk >= 1, "ssd: chunk size must be at least 1");
  const int hg = H / G, HP = H * P, GN = G * N, gP = hg * P;
  if (Tn <= 0 || Bn <= 0) {
    for (int h = 0; h < H; h++) dA[h] = T(0);
    return;
  }
  const int nch = (Tn + chunk - 1) / chunk, Lmax = std::min(chunk, Tn);
  const size_t PN = (size_t)P * N;
  std::vector<double> dA_part((size_t)Bn * H);  // per (b, h), summed over the batch in a fixed order at the end
#pragma omp parallel
  {
    std::vector<double> cs(Lmax), da(Lmax), gate(Lmax);
    std::vector<T> dtc(Lmax), e_cs(Lmax), e_last(Lmax), decay(Lmax), ddt_direct(Lmax), colsum(Lmax), el(hg);
    std::vector<T> Gm((size_t)Lmax * Lmax), dM((size_t)Lmax * Lmax), M((size_t)Lmax * Lmax), dGs((size_t)Lmax * Lmax);
    // the group's heads side by side: Z = B dhᵀ, Xw = diag(w) X, dYs = diag(exp(cs)) dY: (L, hg·P) each;
    // dh = ∂loss/∂(states after the current chunk): (hg·P, N); dCi: one head's inter-chunk dC term (L, N)
    std::vector<T> Z((size_t)Lmax * gP), Xw((size_t)Lmax * gP), dYs((size_t)Lmax * gP), dh((size_t)hg * PN);
    std::vector<T> dCi((size_t)Lmax * N);
#pragma omp for schedule(static)
    for (int bg = 0; bg < Bn * G; bg++) {
      const int b = bg / G, g = bg % G, h0 = g * hg;
      double* dA_sum = dA_part.data() + (size_t)b * H + h0;  // (hg)
      for (int j = 0; j < hg; j++) dA_sum[j] = 0;
      std::fill(dh.begin(), dh.end(), T(0));
      for (int k = nch - 1; k >= 0; k--) {
        const int t0 = k * chunk, L = std::min(chunk, Tn - t0);
        const bool has_prev = k > 0;        // h_prev = 0 in chunk 0
        const bool has_next = k + 1 < nch;  // dh = 0 after the last chunk
        const size_t bt0 = (size_t)b * Tn + t0;
        const T* Bc = Bm + (bt0 * G + g) * N;  // (L, N) rows of stride GN
        const T* Cc = Cm + (bt0 * G + g) * N;  // (L, N) rows of stride GN
        T* dBo = dB + (bt0 * G + g) * N;       // (L, N) rows of stride GN
        T* dCo = dC + (bt0 * G + g) * N;       // (L, N) rows of stride GN
        gemm(false, true, L, L, N, T(1), Cc, GN, Bc, GN, T(0), Gm.data(), L);  // C Bᵀ, shared by the heads
        if (has_next) gemm(false, true, L, gP, N, T(1), Bc, GN, dh.data(), N, T(0), Z.data(), gP);  // B dhᵀ

        for (int j = 0; j < hg; j++) {
          const int h = h0 + j;
          const double Ah = double(A[h]);
          const T* X = x + (bt0 * H + h) * P;    // (L, P) rows of stride HP
          const T* dY = dy + (bt0 * H + h) * P;  // (L, P) rows of stride HP
          T* dX = dx + (bt0 * H + h) * P;        // (L, P) rows of stride HP
          const T* hp = states + (((size_t)b * H + h) * nch + k) * PN;  // h_prev: (P, N)
          const T* dhj = dh.data() + j * PN;                             // (P, N)
          ssd_detail::chunk_log_decay(cs.data(), dtc.data(), dt + bt0 * H + h, H, L, Ah);
          const double csl = cs[L - 1];
          el[j] = ssd_detail::decay_exp(T(csl));
          ssd_detail::decay_from_start(e_cs.data(), cs.data(), L);  // h_prev's decay to position r
          ssd_detail::decay_row(e_last.data(), cs.data(), L - 1);   // position c's decay to the chunk end
          for (int r = 0; r < L; r++) {
            ddt_direct[r] = T(0);
            da[r] = 0;
          }

          // Recompute M and form the intra-chunk gradients elementwise:
          //   dM = dY Xᵀ;  dG_rc = dM_rc exp(cs_r − cs_c) dt_c (gradient of C Bᵀ, summed over heads into dGs);
          //   direct ddt_c += Σ_r dM_rc (C_r·B_c) exp(cs_r − cs_c);  Q_rc = dM_rc M_rc (kept in dM).
          gemm(false, true, L, L, P, T(1), dY, HP, X, HP, T(0), dM.data(), L);
          for (int r = 0; r < L; r++) {
            const size_t row = (size_t)r * L;
            ssd_detail::decay_row(decay.data(), cs.data(), r);
            for (int c = 0; c <= r; c++) {
              const T gd = Gm[row + c] * decay[c], dm = dM[row + c];
              const T dmgd = dm * gd;
              ddt_direct[c] += dmgd;
              M[row + c] = gd * dtc[c];
              const T dg = dm * decay[c] * dtc[c];
              dGs[row + c] = j == 0 ? dg : dGs[row + c] + dg;
              dM[row + c] = dmgd * dtc[c];
            }
            for (int c = r + 1; c < L; c++) M[row + c] = T(0);
            if (j == 0)
              for (int c = r + 1; c < L; c++) dGs[row + c] = T(0);
          }
          // da_i += Σ_{r≥i} Σ_{c<i} Q_rc: going up the rows, colsum[c] = Σ_{r≥i} Q_rc, then a sum over c < i
          std::fill(colsum.begin(), colsum.begin() + L, T(0));
          for (int i = L - 1; i >= 0; i--) {
            const T* q = dM.data() + (size_t)i * L;
            for (int c = 0; c <= i; c++) colsum[c] += q[c];
            da[i] += double(vec_sum(colsum.data(), i));
          }
          // dX = Mᵀ dY (intra-chunk)
          gemm(true, false, L, P, L, T(1), M.data(), L, dY, HP, T(0), dX, HP);

          if (has_next) {
            // through h_next: z_c = dh B_c, s_c = x_c · z_c, w_c = exp(cs_last − cs_c) dt_c
            //   dx_c += w_c z_c;  direct ddt_c += exp(cs_last − cs_c) s_c;  da_i += Σ_{c<i} w_c s_c
            for (int c = 0; c < L; c++) {
              const T* z = Z.data() + (size_t)c * gP + (size_t)j * P;
              const T* xc = X + (size_t)c * HP;
              const double s = double(vec_dot(xc, z, P));
              const T w = e_last[c] * dtc[c];
              T* dxc = dX + (size_t)c * HP;
              for (int p = 0; p < P; p++) dxc[p] += w * z[p];
              ddt_direct[c] += T(double(e_last[c]) * s);
              gate[c] = double(w) * s;
              T* xw = Xw.data() + (size_t)c * gP + (size_t)j * P;  // diag(w) X, for dB below
              for (int p = 0; p < P; p++) xw[p] = w * xc[p];
            }
            double run = 0;
            for (int i = 0; i < L; i++) {
              da[i] += run;
              run += gate[i];
            }
            // h_prev's decay exp(cs_last) contains every step of the chunk
            if (has_prev) {
              const double hd = double(el[j]) * double(vec_dot(dhj, hp, (int)PN));
              for (int i = 0; i < L; i++) da[i] += hd;
            }
          }

          // dC's inter-chunk term, diag(exp(cs)) dY h_prev, per head: its rows also give the inter-chunk decay
          // gradient e_r = dy_r · (exp(cs_r) h_prev C_r) = C_r · (row r of that term), da_i += Σ_{r≥i} e_r.
          // The first head writes dC's rows, the others add (dGs B is added after the heads).
          if (has_prev) {
            for (int r = 0; r < L; r++) {
              const T* d = dY + (size_t)r * HP;
              T* o = dYs.data() + (size_t)r * gP + (size_t)j * P;
              for (int p = 0; p < P; p++) o[p] = e_cs[r] * d[p];
            }
            gemm(false, false, L, N, P, T(1), dYs.data() + (size_t)j * P, gP, hp, N, T(0), dCi.data(), N);
            double run = 0;
            for (int r = L - 1; r >= 0; r--) {
              const T* ci = dCi.data() + (size_t)r * N;
              run += double(vec_dot(Cc + (size_t)r * GN, ci, N));
              da[r] += run;
              T* o = dCo + (size_t)r * GN;
              if (j == 0)
                for (int n = 0; n < N; n++) o[n] = ci[n];
              else
                for (int n = 0; n < N; n++) o[n] += ci[n];
            }
          }

          // gates: a_i = dt_i A, so ddt_i = direct + A da_i and dA += dt_i da_i
          for (int i = 0; i < L; i++) {
            ddt[(bt0 + i) * H + h] = T(double(ddt_direct[i]) + Ah * da[i]);
            dA_sum[j] += double(dtc[i]) * da[i];
          }
        }

        // the group's shares of dC and dB through B and C: dC += dGs B;  dB = dGsᵀ C + Σ_h diag(w) X_h dh_h
        gemm(false, false, L, N, L, T(1), dGs.data(), L, Bc, GN, has_prev ? T(1) : T(0), dCo, GN);
        gemm(true, false, L, N, L, T(1), dGs.data(), L, Cc, GN, T(0), dBo, GN);
        if (has_next) gemm(false, false, L, N, gP, T(1), Xw.data(), gP, dh.data(), N, T(1), dBo, GN);

        // dh for the previous chunk, per head: exp(cs_last) dh + Σ_r exp(cs_r) dy_r C_rᵀ = exp(cs_last) dh + dYsᵀ C
        if (has_prev) {
          for (int j = 0; j < hg; j++)
            for (size_t i = 0; i < PN; i++) dh[j * PN + i] *= el[j];
          gemm(true, false, gP, N, L, T(1), dYs.data(), gP, Cc, GN, T(1), dh.data(), N);
        }
      }
    }
  }

  // fixed-order reduction of dA over the batch
  for (int h = 0; h < H; h++) {
    double s = 0;
    for (int b = 0; b < Bn; b++) s += dA_part[(size_t)b * H + h];
    dA[h] = T(s);
  }
}

}  // namespace canonlab
