#pragma once
// Causal grouped Conv1d over time (Canon layer), threaded. Forward and din are threaded over
// (batch, time-chunk) items; dweight over channel blocks, each channel summed over all (b, t) in order by
// one thread, so dweight does not depend on the thread count.
//
// Depthwise (G == C) is the case Canon layers use, and gets loops whose innermost index is the channel:
// contiguous in both activations and (after a transpose into a small stack tile) weights, so they vectorise.
// Grouped and dense (G < C) convolutions use plain loops: correct, not tuned.
#include <algorithm>
#include <cstddef>

namespace canonlab {

namespace canon_conv_detail {
constexpr int kTimeChunk = 64;    // tokens per forward/din work item
constexpr int kChannelTile = 64;  // channels per stack weight tile in forward/din
constexpr int kTapTile = 4;       // taps per stack weight tile; larger K is processed in tiles
constexpr int kDwBlock = 16;      // channels per dweight work item: one cache line of floats
}  // namespace canon_conv_detail

// out, in: (B, Tn, C); weight: (C, C/G, K)
// out[t, c] = Σ_{j < C/G, i < K} weight[c, j, i] · in[t − (K−1) + i, g·(C/G) + j], g = c / (C/G)
template <class T>
void canon_conv_forward(T* out, const T* in, const T* weight, int B, int Tn, int C, int K, int G) {
  using namespace canon_conv_detail;
  const int cg = C / G;
  const int nchunks = (Tn + kTimeChunk - 1) / kTimeChunk;
#pragma omp parallel for schedule(static)
  for (int item = 0; item < B * nchunks; item++) {
    const int b = item / nchunks, t0 = (item % nchunks) * kTimeChunk, t1 = std::min(t0 + kTimeChunk, Tn);
    const T* inb = in + (size_t)b * Tn * C;  // (Tn, C)
    T* outb = out + (size_t)b * Tn * C;      // (Tn, C)
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
      for (int t = t0; t < t1; t++)
        for (int c = 0; c < C; c++) {
          const int g0 = (c / cg) * cg;
          const T* w = weight + (size_t)c * cg * K;  // (cg, K)
          T acc = 0;
          for (int i = 0; i < K; i++) {
            const int s = t - (K - 1) + i;
            if (s < 0) continue;
            const T* x = inb + (size_t)s * C + g0;
            for (int j = 0; j < cg; j++) acc += w[(size_t)j * K + i] * x[j];
          }
          outb[(size_t)t * C + c] = acc;
        }
    }
  }
}

// din: (B, Tn, C) written; dweight: (C, C/G, K) accumulated; dout, in: (B, Tn, C)
template <class T>
void canon_conv_backward(T* din, T* dweight, const T* dout, const T* in, const T* weight, int B, int Tn, int C, int K,
                         int G) {
  using namespace canon_conv_detail;
  const int cg = C / G;
  const int nchunks = (Tn + kTimeChunk - 1) / kTimeChunk;
  // din[s, g·cg + j] = Σ_{c in group g, i} weight[c, j, i] · dout[s + (K−1) − i, c]
#pragma omp parallel for schedule(static)
  for (int item = 0; item < B * nchunks; item++) {
    const int b = item / nchunks, s0 = (item % nchunks) * kTimeChunk, s1 = std::min(s0 + kTimeChunk, Tn);
    const T* doutb = dout + (size_t)b * Tn * C;  // (Tn, C)
    T* dinb = din + (size_t)b * Tn * C;          // (Tn, C)
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
      for (int s = s0; s < s1; s++)
        for (int ci = 0; ci < C; ci++) {
          const int g0 = (ci / cg) * cg, j = ci - g0;
          T acc = 0;
          for (int i = 0; i < K; i++) {
            const int t = s + (K - 1) - i;
            if (t >= Tn) continue;
            const T* g = doutb + (size_t)t * C + g0;
            for (int cl = 0; cl < cg; cl++) acc += weight[((size_t)(g0 + cl) * cg + j) * K + i] * g[cl];
          }
          dinb[(size_t)s * C + ci] = acc;
        }
    }
  }

  // dweight[c, j, i] += Σ_{b, t} dout[t, c] · in[t − (K−1) + i, g·cg + j]
  if (cg == 1) {
    const int nblocks = (C + kDwBlock - 1) / kDwBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kDwBlock, cb = std::min(kDwBlock, C - c0);
      for (int i0 = 0; i0 < K; i0 += kTapTile) {
        const int kb = std::min(kTapTile, K - i0);
        double acc[kTapTile][kDwBlock] = {};
        for (int b = 0; b < B; b++)
          for (int t = 0; t < Tn; t++) {
            const T* g = dout + ((size_t)b * Tn + t) * C + c0;
            for (int ii = 0; ii < kb; ii++) {
              const int s = t - (K - 1) + i0 + ii;
              if (s < 0) continue;
              const T* x = in + ((size_t)b * Tn + s) * C + c0;
              for (int cc = 0; cc < cb; cc++) acc[ii][cc] += double(g[cc]) * double(x[cc]);
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
      for (int j0 = 0; j0 < cg; j0 += kDwBlock) {
        const int jb = std::min(kDwBlock, cg - j0);
        for (int i0 = 0; i0 < K; i0 += kTapTile) {
          const int kb = std::min(kTapTile, K - i0);
          double acc[kTapTile][kDwBlock] = {};
          for (int b = 0; b < B; b++)
            for (int t = 0; t < Tn; t++) {
              const double g = dout[((size_t)b * Tn + t) * C + c];
              for (int ii = 0; ii < kb; ii++) {
                const int s = t - (K - 1) + i0 + ii;
                if (s < 0) continue;
                const T* x = in + ((size_t)b * Tn + s) * C + g0 + j0;
                for (int jj = 0; jj < jb; jj++) acc[ii][jj] += g * double(x[jj]);
              }
            }
          for (int ii = 0; ii < kb; ii++)
            for (int jj = 0; jj < jb; jj++) dw[(size_t)(j0 + jj) * K + i0 + ii] += T(acc[ii][jj]);
        }
      }
    }
  }
}

}  // namespace canonlab
