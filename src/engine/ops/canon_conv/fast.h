#pragma once
// Causal grouped Conv1d over time (Canon layer), threaded. Forward and din are threaded over
// (batch, time-chunk) items; dweight over channel blocks, each channel summed over all (b, t) in order by
// one thread, so dweight does not depend on the thread count.
//
// Depthwise (G == C) is the case Canon layers use, and gets loops whose innermost index is the channel:
// contiguous in both activations and (after a transpose into a small stack tile) weights, so they vectorise.
// Grouped and dense (G < C) convolutions are small matrix-vector products per token, also vectorised over
// channels through stack weight tiles; they are correct and reasonable, not tuned like the depthwise case.
#include <algorithm>
#include <cstddef>

#include "engine/error.h"

namespace canonlab {

namespace canon_conv_detail {
constexpr int kTimeChunk = 64;    // tokens per forward/din work item
constexpr int kChannelTile = 64;  // channels per stack weight tile in forward/din
constexpr int kTapTile = 4;       // taps per stack weight tile; larger K is processed in tiles
constexpr int kDwBlock = 16;      // channels per dweight work item: one cache line of floats
// grouped/dense weight tiles: kGroupTile channels along the vectorised loop, kGroupInner along the other
constexpr int kGroupTile = 32;
constexpr int kGroupInner = 16;
}  // namespace canon_conv_detail

// out, in: (B, Tn, C); weight: (C, C/G, K)
// out[t, c] = Σ_{j < C/G, i < K} weight[c, j, i] · in[t − (K−1) + i, g·(C/G) + j], g = c / (C/G)
// Rows t0 <= t < t1 of one sequence: outb, inb: (Tn, C) of sequence b; cg = C/G. One thread. The order of the
// sums of an output element does not depend on t0, t1, so any split into row ranges gives the same bits (the
// fused Canon op, fused.h, relies on it).
template <class T>
void canon_conv_forward_rows(T* outb, const T* inb, const T* weight, int t0, int t1, int C, int K, int cg) {
  using namespace canon_conv_detail;
  if (cg == 1) {
    for (int c0 = 0; c0 < C; c0 += kChannelTile) {
      const int cb = std::min(kChannelTile, C - c0);
      for (int t = t0; t < t1; t++)
        for (int cc = 0; cc < cb; cc++) outb[(size_t)t * C + c0 + cc] = T(0);
      for (int i0 = 0; i0 < K; i0 += kTapTile) {
        const int kb = std::min(kTapTile, K - i0);
        T wt[kTapTile][kChannelTile];  // wt[ii][cc] = weight[c0 + cc, 0, i0 + ii]
        for (int ii = 0; ii < kb; ii++)
          for (int cc = 0; cc < cb; cc++) wt[ii][cc] = weight[(size_t)(c0 + cc) * K + i0 + ii];
        for (int t = t0; t < t1; t++) {
          T* o = outb + (size_t)t * C + c0;
          for (int ii = 0; ii < kb; ii++) {
            const int s = t - (K - 1) + i0 + ii;
            if (s < 0) continue;
            const T* x = inb + (size_t)s * C + c0;
            for (int cc = 0; cc < cb; cc++) o[cc] += wt[ii][cc] * x[cc];
          }
        }
      }
    }
  } else {
    // Per group and token, out = Σ_i W_i x_{t−(K−1)+i}: small matrix-vector products. Weight tiles are laid
    // out [tap][input j][output c] so the innermost loop runs over output channels.
    for (int t = t0; t < t1; t++)
      for (int c = 0; c < C; c++) outb[(size_t)t * C + c] = T(0);
    for (int g0 = 0; g0 < C; g0 += cg)
      for (int c0 = 0; c0 < cg; c0 += kGroupTile) {
        const int cb = std::min(kGroupTile, cg - c0);
        for (int j0 = 0; j0 < cg; j0 += kGroupInner) {
          const int jb = std::min(kGroupInner, cg - j0);
          for (int i0 = 0; i0 < K; i0 += kTapTile) {
            const int kb = std::min(kTapTile, K - i0);
            // wt[ii][jj][cc] = weight[g0 + c0 + cc, j0 + jj, i0 + ii], zero-padded to a full tile so the
            // innermost loop has a constant trip count and the accumulator tile stays in registers
            T wt[kTapTile][kGroupInner][kGroupTile] = {};
            for (int cc = 0; cc < cb; cc++)
              for (int jj = 0; jj < jb; jj++)
                for (int ii = 0; ii < kb; ii++)
                  wt[ii][jj][cc] = weight[((size_t)(g0 + c0 + cc) * cg + j0 + jj) * K + i0 + ii];
            for (int t = t0; t < t1; t++) {
              T* o = outb + (size_t)t * C + g0 + c0;
              T acc[kGroupTile] = {};
              for (int cc = 0; cc < cb; cc++) acc[cc] = o[cc];
              for (int ii = 0; ii < kb; ii++) {
                const int s = t - (K - 1) + i0 + ii;
                if (s < 0) continue;
                const T* x = inb + (size_t)s * C + g0 + j0;
                for (int jj = 0; jj < jb; jj++) {
                  const T xv = x[jj];
                  for (int cc = 0; cc < kGroupTile; cc++) acc[cc] += wt[ii][jj][cc] * xv;
                }
              }
              for (int cc = 0; cc < cb; cc++) o[cc] = acc[cc];
            }
          }
        }
      }
  }
}

template <class T>
void canon_conv_forward(T* out, const T* in, const T* weight, int B, int Tn, int C, int K, int G) {
  using namespace canon_conv_detail;
  CANONLAB_CHECK(G > 0 && C % G == 0 && K > 0, "canon_conv: groups must divide channels and K must be positive");
  const int cg = C / G;
  const int nchunks = (Tn + kTimeChunk - 1) / kTimeChunk;
#pragma omp parallel for schedule(static)
  for (int item = 0; item < B * nchunks; item++) {
    const int b = item / nchunks, t0 = (item % nchunks) * kTimeChunk, t1 = std::min(t0 + kTimeChunk, Tn);
    canon_conv_forward_rows(out + (size_t)b * Tn * C, in + (size_t)b * Tn * C, weight, t0, t1, C, K, cg);
  }
}

// Rows s0 <= s < s1 of one sequence's din: dinb, doutb: (Tn, C) of sequence b; cg = C/G. One thread; as in
// forward, the bits of a row do not depend on the split.
// din[s, g·cg + j] = Σ_{c in group g, i} weight[c, j, i] · dout[s + (K−1) − i, c]
template <class T>
void canon_conv_din_rows(T* dinb, const T* doutb, const T* weight, int s0, int s1, int Tn, int C, int K, int cg) {
  using namespace canon_conv_detail;
  if (cg == 1) {
    for (int c0 = 0; c0 < C; c0 += kChannelTile) {
      const int cb = std::min(kChannelTile, C - c0);
      for (int s = s0; s < s1; s++)
        for (int cc = 0; cc < cb; cc++) dinb[(size_t)s * C + c0 + cc] = T(0);
      for (int i0 = 0; i0 < K; i0 += kTapTile) {
        const int kb = std::min(kTapTile, K - i0);
        T wt[kTapTile][kChannelTile];
        for (int ii = 0; ii < kb; ii++)
          for (int cc = 0; cc < cb; cc++) wt[ii][cc] = weight[(size_t)(c0 + cc) * K + i0 + ii];
        for (int s = s0; s < s1; s++) {
          T* d = dinb + (size_t)s * C + c0;
          for (int ii = 0; ii < kb; ii++) {
            const int t = s + (K - 1) - (i0 + ii);
            if (t >= Tn) continue;
            const T* g = doutb + (size_t)t * C + c0;
            for (int cc = 0; cc < cb; cc++) d[cc] += wt[ii][cc] * g[cc];
          }
        }
      }
    }
  } else {
    // din_s = Σ_i W_i^T dout_{s+(K−1)−i} per group: the transposed products, with weight tiles laid out
    // [tap][output c][input j] so the innermost loop runs over the input channels being written.
    for (int s = s0; s < s1; s++)
      for (int c = 0; c < C; c++) dinb[(size_t)s * C + c] = T(0);
    for (int g0 = 0; g0 < C; g0 += cg)
      for (int j0 = 0; j0 < cg; j0 += kGroupTile) {
        const int jb = std::min(kGroupTile, cg - j0);
        for (int c0 = 0; c0 < cg; c0 += kGroupInner) {
          const int cb = std::min(kGroupInner, cg - c0);
          for (int i0 = 0; i0 < K; i0 += kTapTile) {
            const int kb = std::min(kTapTile, K - i0);
            // wt[ii][cc][jj] = weight[g0 + c0 + cc, j0 + jj, i0 + ii], zero-padded as in forward
            T wt[kTapTile][kGroupInner][kGroupTile] = {};
            for (int cc = 0; cc < cb; cc++)
              for (int jj = 0; jj < jb; jj++)
                for (int ii = 0; ii < kb; ii++)
                  wt[ii][cc][jj] = weight[((size_t)(g0 + c0 + cc) * cg + j0 + jj) * K + i0 + ii];
            for (int s = s0; s < s1; s++) {
              T* d = dinb + (size_t)s * C + g0 + j0;
              T acc[kGroupTile] = {};
              for (int jj = 0; jj < jb; jj++) acc[jj] = d[jj];
              for (int ii = 0; ii < kb; ii++) {
                const int t = s + (K - 1) - (i0 + ii);
                if (t >= Tn) continue;
                const T* gr = doutb + (size_t)t * C + g0 + c0;
                for (int cc = 0; cc < cb; cc++) {
                  const T gv = gr[cc];
                  for (int jj = 0; jj < kGroupTile; jj++) acc[jj] += wt[ii][cc][jj] * gv;
                }
              }
              for (int jj = 0; jj < jb; jj++) d[jj] = acc[jj];
            }
          }
        }
      }
  }
}

// dweight: (C, C/G, K) accumulated; dout, in: (B, Tn, C)
// dweight[c, j, i] += Σ_{b, t} dout[t, c] · in[t − (K−1) + i, g·cg + j]
template <class T>
void canon_conv_dweight(T* dweight, const T* dout, const T* in, int B, int Tn, int C, int K, int G) {
  using namespace canon_conv_detail;
  const int cg = C / G;
  if (cg == 1) {
    const int nblocks = (C + kDwBlock - 1) / kDwBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kDwBlock, cb = std::min(kDwBlock, C - c0);
      for (int i0 = 0; i0 < K; i0 += kTapTile) {
        const int kb = std::min(kTapTile, K - i0);
        double acc[kTapTile][kDwBlock] = {};
        for (int b = 0; b < B; b++) {
          const T* g = dout + (size_t)b * Tn * C + c0;  // (Tn, C) from channel c0
          const T* x = in + (size_t)b * Tn * C + c0;
          for (int ii = 0; ii < kb; ii++) {
            const int shift = (K - 1) - (i0 + ii);  // this tap reads `shift` steps back
            // A float partial per sequence and tap lets the inner loop be one vector FMA per token; the
            // rounding is that of a float sum over one sequence (as in a BLAS reduction), and the sum across
            // sequences is in double.
            T part[kDwBlock] = {};
            if (cb == kDwBlock) {
              for (int t = shift; t < Tn; t++)
                for (int cc = 0; cc < kDwBlock; cc++)
                  part[cc] += g[(size_t)t * C + cc] * x[(size_t)(t - shift) * C + cc];
            } else {
              for (int t = shift; t < Tn; t++)
                for (int cc = 0; cc < cb; cc++) part[cc] += g[(size_t)t * C + cc] * x[(size_t)(t - shift) * C + cc];
            }
            for (int cc = 0; cc < cb; cc++) acc[ii][cc] += double(part[cc]);
          }
        }
        for (int ii = 0; ii < kb; ii++)
          for (int cc = 0; cc < cb; cc++) dweight[(size_t)(c0 + cc) * K + i0 + ii] += T(acc[ii][cc]);
      }
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
      const int g0 = (c / cg) * cg;
      T* dw = dweight + (size_t)c * cg * K;  // (cg, K)
      for (int j0 = 0; j0 < cg; j0 += kGroupTile) {
        const int jb = std::min(kGroupTile, cg - j0);
        for (int i0 = 0; i0 < K; i0 += kTapTile) {
          const int kb = std::min(kTapTile, K - i0);
          double acc[kTapTile][kGroupTile] = {};
          for (int b = 0; b < B; b++) {
            const T* g = dout + (size_t)b * Tn * C + c;      // column c of (Tn, C)
            const T* x = in + (size_t)b * Tn * C + g0 + j0;  // (Tn, C) from channel g0 + j0
            // float partials per sequence, as in the depthwise case
            T part[kTapTile][kGroupTile] = {};
            for (int ii = 0; ii < kb; ii++) {
              const int shift = (K - 1) - (i0 + ii);
              for (int t = shift; t < Tn; t++) {
                const T gv = g[(size_t)t * C];
                const T* xs = x + (size_t)(t - shift) * C;
                if (jb == kGroupTile)
                  for (int jj = 0; jj < kGroupTile; jj++) part[ii][jj] += gv * xs[jj];
                else
                  for (int jj = 0; jj < jb; jj++) part[ii][jj] += gv * xs[jj];
              }
            }
            for (int ii = 0; ii < kb; ii++)
              for (int jj = 0; jj < jb; jj++) acc[ii][jj] += double(part[ii][jj]);
          }
          for (int ii = 0; ii < kb; ii++)
            for (int jj = 0; jj < jb; jj++) dw[(size_t)(j0 + jj) * K + i0 + ii] += T(acc[ii][jj]);
        }
      }
    }
  }
}

// din: (B, Tn, C) written; dweight: (C, C/G, K) accumulated; dout, in: (B, Tn, C)
template <class T>
void canon_conv_backward(T* din, T* dweight, const T* dout, const T* in, const T* weight, int B, int Tn, int C, int K,
                         int G) {
  using namespace canon_conv_detail;
  CANONLAB_CHECK(G > 0 && C % G == 0 && K > 0, "canon_conv: groups must divide channels and K must be positive");
  const int cg = C / G;
  const int nchunks = (Tn + kTimeChunk - 1) / kTimeChunk;
#pragma omp parallel for schedule(static)
  for (int item = 0; item < B * nchunks; item++) {
    const int b = item / nchunks, s0 = (item % nchunks) * kTimeChunk, s1 = std::min(s0 + kTimeChunk, Tn);
    canon_conv_din_rows(din + (size_t)b * Tn * C, dout + (size_t)b * Tn * C, weight, s0, s1, Tn, C, K, cg);
  }
  canon_conv_dweight(dweight, dout, in, B, Tn, C, K, G);
}

}  // namespace canonlab
