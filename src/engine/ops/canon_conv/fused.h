#pragma once
// The Canon layer fused on the CPU: out = [in +] norm(act(conv(in))) in one pass over (B, Tn, C), and its backward
// in one pass for the depthwise case (plus the norm's parameter-gradient pass when there is a norm).
//
// Same bits as the separate ops (conv -> silu/elu -> rmsnorm/layernorm -> residual add, the CanonLayer of before):
// every element is computed by the same expressions in the same order, only while its rows are still in cache.
// - forward, per (sequence, time chunk): the conv rows (canon_conv_forward_rows, fast.h), then per row the
//   activation, the norm (norm/fast.h's row functions) and the residual add, writing `out` once.
// - kept for backward: the conv output (only when an activation or a norm follows it) and the norm's mean/rstd
//   per row; the activation output is recomputed in backward (elementwise, cheaper than storing it).
// - backward, depthwise (G == C), one sequence per work item, rows in time order: dconv row t (norm backward, then
//   the activation's) into a ring of the last K rows; the per-sequence float partials of dweight, each tap summed
//   over t in order exactly as canon_conv_dweight does; din row t−(K−1) once its K dconv rows exist, plus the
//   residual's dout. The partials of all sequences are then summed per channel in sequence order in double. No
//   (B, Tn, C) temporary at all.
// - backward, grouped: dconv rows into a (B, Tn, C) scratch, then din (+ residual) per chunk and dweight as fast.h.
// - the norm's dweight/dbias: a pass over channel blocks, each channel summed over all rows in row order in
//   double, as norm/fast.h does (summing per sequence first would round differently).
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/error.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/epilogue.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/norm/fast.h"

namespace canonlab {

namespace canon_fused_detail {
constexpr int kChannelBlock = 16;  // channels per norm-gradient work item: one cache line of floats

// y = act(z), the expressions of silu_forward / elu_forward; y may alias z. (C)
template <class T>
inline void act_forward_row(T* y, const T* z, int C, CanonActivation a) {
  if (a == CanonActivation::silu)
    for (int c = 0; c < C; c++) y[c] = z[c] * sigmoid(z[c]);
  else if (a == CanonActivation::elu)
    elu_row(y, z, size_t(C));
  else
    for (int c = 0; c < C; c++) y[c] = z[c];
}
// dz = dy · act'(z), the expressions of silu_backward / elu_backward; dz may alias dy. (C)
template <class T>
inline void act_backward_row(T* dz, const T* dy, const T* z, int C, CanonActivation a) {
  if (a == CanonActivation::silu)
    for (int c = 0; c < C; c++) {
      T s = sigmoid(z[c]);
      dz[c] = dy[c] * s * (T(1) + z[c] * (T(1) - s));
    }
  else if (a == CanonActivation::elu)
    elu_backward_row(dz, dy, z, size_t(C));
  else
    for (int c = 0; c < C; c++) dz[c] = dy[c];
}

// dconv row from dout row g and the saved conv row z: through the norm (at its row statistics) and the activation.
// d: (C) written, used as scratch for act(z) first. Only when ep.saves_conv().
template <class T>
inline void dconv_row(T* d, const T* g, const T* z, const T* norm_w, T mean, T rstd, int C, CanonEpilogue ep) {
  if (ep.norm != CanonNorm::none) {
    const T* x = z;  // the norm's input
    if (ep.activation != CanonActivation::none) {
      act_forward_row(d, z, C, ep.activation);
      x = d;
    }
    // d aliases x here; the row functions read each x[c] before writing d[c]
    if (ep.norm == CanonNorm::rmsnorm) rmsnorm_backward_row(d, g, x, norm_w, rstd, C);
    else layernorm_backward_row(d, g, x, norm_w, mean, rstd, C);
    if (ep.activation != CanonActivation::none) act_backward_row(d, d, z, C, ep.activation);
  } else {
    act_backward_row(d, g, z, C, ep.activation);
  }
}

// The norm's parameter gradients, as rmsnorm_backward / layernorm_backward's second pass, with the norm's input
// recomputed from the saved conv output. dw, db: (C) accumulated (each may be null); dout, conv: (N, C).
template <class T>
void norm_param_grads(T* dw, T* db, const T* dout, const T* conv, const T* mean, const T* rstd, int N, int C,
                      CanonEpilogue ep) {
  constexpr int CB = kChannelBlock;
  const int nblocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * CB, cb = std::min(CB, C - c0);
    double accw[CB] = {}, accb[CB] = {};
    T xa[CB];
    for (int n = 0; n < N; n++) {
      const T* dyn = dout + (size_t)n * C + c0;
      act_forward_row(xa, conv + (size_t)n * C + c0, cb, ep.activation);
      double r = rstd[n];
      if (ep.norm == CanonNorm::rmsnorm) {
        for (int j = 0; j < cb; j++) accw[j] += double(dyn[j]) * double(xa[j]) * r;
      } else {
        double m = mean[n];
        for (int j = 0; j < cb; j++) {
          accw[j] += double(dyn[j]) * (double(xa[j]) - m) * r;
          accb[j] += double(dyn[j]);
        }
      }
    }
    for (int j = 0; j < cb; j++) {
      if (dw) dw[c0 + j] += T(accw[j]);
      if (db && ep.norm == CanonNorm::layernorm) db[c0 + j] += T(accb[j]);
    }
  }
}
}  // namespace canon_fused_detail

// Elements of scratch canon_fused_backward needs (need not be initialised).
inline size_t canon_fused_scratch_size(int B, int Tn, int C, int K, int G, CanonEpilogue ep) {
  if (G == C) return (size_t)K * C + (size_t)B * 2 * K * C;  // transposed taps; per sequence a dconv ring + partials
  return ep.saves_conv() ? (size_t)B * Tn * C : 0;             // dconv
}

// out, in: (B, Tn, C); weight: (C, C/G, K); norm_w, norm_b: (C) or nullptr.
// Saved for backward: conv: (B, Tn, C) iff ep.saves_conv(), else may be null; rstd: (B·Tn) with a norm, mean:
// (B·Tn) with layernorm (else null).
template <class T>
void canon_fused_forward(T* out, T* conv, T* mean, T* rstd, const T* in, const T* weight, const T* norm_w,
                         const T* norm_b, int B, int Tn, int C, int K, int G, CanonEpilogue ep, T eps) {
  using namespace canon_conv_detail;
  using namespace canon_fused_detail;
  CANONLAB_CHECK(G > 0 && C % G == 0 && K > 0, "canon_fused: groups must divide channels and K must be positive");
  const bool save = ep.saves_conv();
  CANONLAB_CHECK(!save || conv, "canon_fused_forward: an activation or norm needs the conv output buffer");
  CANONLAB_CHECK(ep.norm == CanonNorm::none || (rstd && (ep.norm == CanonNorm::rmsnorm || mean)),
                 "canon_fused_forward: a norm needs its row statistics buffers");
  const int cg = C / G;
  const int nchunks = (Tn + kTimeChunk - 1) / kTimeChunk;
#pragma omp parallel for schedule(static)
  for (int item = 0; item < B * nchunks; item++) {
    const int b = item / nchunks, t0 = (item % nchunks) * kTimeChunk, t1 = std::min(t0 + kTimeChunk, Tn);
    // z: the conv rows, written where backward wants them, or straight into out when nothing follows
    T* zb = (save ? conv : out) + (size_t)b * Tn * C;  // (Tn, C)
    canon_conv_forward_rows(zb, in + (size_t)b * Tn * C, weight, t0, t1, C, K, cg);
    for (int t = t0; t < t1; t++) {
      const size_t row = (size_t)b * Tn + t;
      const T* z = zb + (size_t)t * C;
      T* y = out + row * C;
      const T* x = z;  // the norm's input
      if (ep.activation != CanonActivation::none) {
        act_forward_row(y, z, C, ep.activation);
        x = y;
      }
      if (ep.norm == CanonNorm::rmsnorm) rstd[row] = rmsnorm_forward_row(y, x, norm_w, C, eps);
      else if (ep.norm == CanonNorm::layernorm) layernorm_forward_row(y, mean[row], rstd[row], x, norm_w, norm_b, C, eps);
      if (ep.residual) {
        const T* h = in + row * C;
        for (int c = 0; c < C; c++) y[c] = h[c] + y[c];
      }
    }
  }
}

// din: (B, Tn, C) written; dweight: (C, C/G, K), dnorm_w, dnorm_b: (C) accumulated (the norm's may be null);
// dout, in: (B, Tn, C); conv, mean, rstd as saved by canon_fused_forward; scratch: canon_fused_scratch_size(...).
template <class T>
void canon_fused_backward(T* din, T* dweight, T* dnorm_w, T* dnorm_b, T* scratch, const T* dout, const T* in,
                          const T* conv, const T* weight, const T* norm_w, const T* mean, const T* rstd, int B,
                          int Tn, int C, int K, int G, CanonEpilogue ep) {
  using namespace canon_conv_detail;
  using namespace canon_fused_detail;
  CANONLAB_CHECK(G > 0 && C % G == 0 && K > 0, "canon_fused: groups must divide channels and K must be positive");
  const bool save = ep.saves_conv();
  const int N = B * Tn;
  auto stat = [&](const T* s, size_t row) { return s ? s[row] : T(0); };
  if (G == C) {
    // wt[i, c] = weight[c, 0, i]: the taps transposed so every row loop below runs over contiguous channels
    T* wt = scratch;  // (K, C)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < K; i++) wt[(size_t)i * C + c] = weight[(size_t)c * K + i];
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
      T* ring = scratch + (size_t)K * C + (size_t)b * 2 * K * C;  // (K, C): dconv rows t−K+1 .. t, row t at t % K
      T* part = ring + (size_t)K * C;                             // (K, C): this sequence's dweight partials
      std::fill(part, part + (size_t)K * C, T(0));
      const T* doutb = dout + (size_t)b * Tn * C;  // (Tn, C)
      const T* inb = in + (size_t)b * Tn * C;      // (Tn, C)
      T* dinb = din + (size_t)b * Tn * C;          // (Tn, C)
      // without an activation or norm dconv is dout itself
      auto dconv = [&](int t) -> const T* { return save ? ring + (size_t)(t % K) * C : doutb + (size_t)t * C; };
      // din[s, c] = Σ_i weight[c, 0, i] · dconv[s + (K−1) − i, c] (+ dout[s, c]), taps in canon_conv_din_rows' order
      auto din_row = [&](int s) {
        T* d = dinb + (size_t)s * C;
        for (int c = 0; c < C; c++) d[c] = T(0);
        for (int i = 0; i < K; i++) {
          const int t = s + (K - 1) - i;
          if (t >= Tn) continue;
          const T* g = dconv(t);
          const T* w = wt + (size_t)i * C;
          for (int c = 0; c < C; c++) d[c] += w[c] * g[c];
        }
        if (ep.residual) {
          const T* g = doutb + (size_t)s * C;
          for (int c = 0; c < C; c++) d[c] += g[c];
        }
      };
      for (int t = 0; t < Tn; t++) {
        const size_t row = (size_t)b * Tn + t;
        if (save)
          dconv_row(ring + (size_t)(t % K) * C, doutb + (size_t)t * C, conv + row * C, norm_w, stat(mean, row),
                    stat(rstd, row), C, ep);
        const T* g = dconv(t);
        // tap i reads `shift` steps back; each (tap, channel) partial sums t in increasing order, as in fast.h
        for (int i = 0; i < K; i++) {
          const int shift = (K - 1) - i;
          if (t < shift) continue;
          const T* x = inb + (size_t)(t - shift) * C;
          T* p = part + (size_t)i * C;
          for (int c = 0; c < C; c++) p[c] += g[c] * x[c];
        }
        if (t >= K - 1) din_row(t - (K - 1));
      }
      for (int s = std::max(0, Tn - (K - 1)); s < Tn; s++) din_row(s);
    }
    // dweight[c, 0, i] += Σ_b part_b[i, c]: sequences in order, in double, as canon_conv_dweight
    const int nblocks = (C + kDwBlock - 1) / kDwBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kDwBlock, cb = std::min(kDwBlock, C - c0);
      for (int i = 0; i < K; i++) {
        double acc[kDwBlock] = {};
        for (int b = 0; b < B; b++) {
          const T* p = scratch + (size_t)K * C + (size_t)b * 2 * K * C + (size_t)K * C + (size_t)i * C + c0;
          for (int cc = 0; cc < cb; cc++) acc[cc] += double(p[cc]);
        }
        for (int cc = 0; cc < cb; cc++) dweight[(size_t)(c0 + cc) * K + i] += T(acc[cc]);
      }
    }
  } else {
    const int cg = C / G;
    const T* dconv = dout;
    if (save) {
      T* d = scratch;  // (B, Tn, C)
#pragma omp parallel for schedule(static)
      for (int row = 0; row < N; row++)
        dconv_row(d + (size_t)row * C, dout + (size_t)row * C, conv + (size_t)row * C, norm_w, stat(mean, row),
                  stat(rstd, row), C, ep);
      dconv = d;
    }
    const int nchunks = (Tn + kTimeChunk - 1) / kTimeChunk;
#pragma omp parallel for schedule(static)
    for (int item = 0; item < B * nchunks; item++) {
      const int b = item / nchunks, s0 = (item % nchunks) * kTimeChunk, s1 = std::min(s0 + kTimeChunk, Tn);
      T* dinb = din + (size_t)b * Tn * C;
      canon_conv_din_rows(dinb, dconv + (size_t)b * Tn * C, weight, s0, s1, Tn, C, K, cg);
      if (ep.residual)
        for (size_t i = (size_t)s0 * C; i < (size_t)s1 * C; i++) dinb[i] += dout[(size_t)b * Tn * C + i];
    }
    canon_conv_dweight(dweight, dconv, in, B, Tn, C, K, G);
  }
  if (ep.norm != CanonNorm::none && (dnorm_w || dnorm_b))
    norm_param_grads(norm_w ? dnorm_w : nullptr, dnorm_b, dout, conv, mean, rstd, N, C, ep);
}

}  // namespace canonlab
