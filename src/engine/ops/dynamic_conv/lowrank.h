#pragma once
// Dynamic Canon's term with the kernel offsets formed on the fly (docs/canon-variants.md): the offset of token t is
// the rank-R map Δ_t = U z_t, U: (C·K, R), z_t: (R); this op never writes the (B·Tn, C, K) tensor of all offsets
// that fast.h reads (and the GEMMs that would make and consume it have an inner dimension of R). Definition, as
// the composition in naive.h:
//   out[t, c]  += Σ_i Δ_t[c, i] · in[t − (K−1) + i, c],          Δ_t[c, i] = Σ_r U[c·K + i, r] · z_t[r]
// and its backward. Each output element is one token's (or, for dU, one channel's) own sum in a fixed order: no
// reduction across threads, so the bits do not depend on the thread count. A zero U adds exactly zero.
//
// Channels go in blocks of kBlock (every loop over a block has a constant trip count, so the compiler keeps a
// block's sums in registers), the last C % kBlock channels one at a time through the same code.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/error.h"

namespace canonlab {

namespace dynamic_lowrank_detail {
constexpr int kBlock = 16;  // channels per block: two AVX2 registers of floats, one AVX-512 register

// ut: (K, R, C), ut[i, r, c] = up[c·K + i, r]: the channel index innermost, so a block's loads are contiguous
template <class T>
std::vector<T> transpose_up(const T* up, int C, int K, int R) {
  std::vector<T> ut((size_t)K * R * C);
  for (int c = 0; c < C; c++)
    for (int i = 0; i < K; i++)
      for (int r = 0; r < R; r++) ut[((size_t)i * R + r) * C + c] = up[((size_t)c * K + i) * R + r];
  return ut;
}

// out[w] += Σ_{i >= i_first} (Σ_r ut[i, r, w] · z_i[r]) · x_i[w] for the W channels at out, ut, x: tap i reads the
// row x + (i − i_first)·x_step and the map input z + (i − i_first)·z_step (the forward: the rows before t and t's own
// z; din: the later tokens' gradients and z's). Δ is summed over r, then the taps over i, in ascending order.
template <int W, class T>
inline void taps_block(T* out, const T* ut, const T* x_first, long x_step, const T* z_first, long z_step, int i_first,
                       int K, int R, int C) {
  T acc[W] = {};
  for (int i = i_first; i < K; i++) {
    const T* x = x_first + (i - i_first) * x_step;
    const T* z = z_first + (i - i_first) * z_step;
    T d[W] = {};
    for (int r = 0; r < R; r++) {
      const T zr = z[r];
      const T* u = ut + ((size_t)i * R + r) * C;
      for (int w = 0; w < W; w++) d[w] += u[w] * zr;
    }
    for (int w = 0; w < W; w++) acc[w] += d[w] * x[w];
  }
  for (int w = 0; w < W; w++) out[w] += acc[w];
}

// p[r, w] += Σ_{i >= i_first} g[w] · x_i[w] · ut[i, r, w], x_i = x_first + (i − i_first)·C: a token's dz, per lane
template <int W, class T>
inline void dz_block(T* p, const T* g, const T* x_first, const T* ut, int i_first, int K, int R, int C) {
  for (int i = i_first; i < K; i++) {
    const T* x = x_first + (size_t)(i - i_first) * C;
    T gx[W];
    for (int w = 0; w < W; w++) gx[w] = g[w] * x[w];
    for (int r = 0; r < R; r++) {
      const T* u = ut + ((size_t)i * R + r) * C;
      T* pr = p + (size_t)r * W;
      for (int w = 0; w < W; w++) pr[w] += gx[w] * u[w];
    }
  }
}

// acc[i, r, w] += g[w] · x_i[w] · z[r] for i >= i_first, x_i = x_first + (i − i_first)·C: one token's share of dU
template <int W, class T>
inline void du_block(T* acc, const T* g, const T* x_first, const T* z, int i_first, int K, int R, int C) {
  for (int i = i_first; i < K; i++) {
    const T* x = x_first + (size_t)(i - i_first) * C;
    T gx[W];
    for (int w = 0; w < W; w++) gx[w] = g[w] * x[w];
    for (int r = 0; r < R; r++) {
      const T zr = z[r];
      T* a = acc + ((size_t)i * R + r) * W;
      for (int w = 0; w < W; w++) a[w] += gx[w] * zr;
    }
  }
}
}  // namespace dynamic_lowrank_detail

// out, in: (B, Tn, C); z: (B·Tn, R); up: (C·K, R). out accumulated.
template <class T>
void dynamic_conv_lowrank_forward(T* out, const T* in, const T* z, const T* up, int B, int Tn, int C, int K, int R) {
  using namespace dynamic_lowrank_detail;
  CANONLAB_CHECK(K > 0 && C > 0 && R > 0, "dynamic_conv_lowrank: K, C and R must be positive");
  const std::vector<T> ut = transpose_up(up, C, K, R);
  const long rows = (long)B * Tn;
  const int full = C / kBlock * kBlock;
#pragma omp parallel for schedule(static)
  for (long row = 0; row < rows; row++) {
    const int t = int(row % Tn);
    const int i_first = std::max(0, K - 1 - t);  // taps before the sequence start read zero
    const T* x = in + (row - (K - 1) + i_first) * C;  // the row tap i_first reads
    const T* zt = z + row * R;
    T* o = out + row * C;
    int c = 0;
    for (; c < full; c += kBlock) taps_block<kBlock>(o + c, ut.data() + c, x + c, C, zt, 0, i_first, K, R, C);
    for (; c < C; c++) taps_block<1>(o + c, ut.data() + c, x + c, C, zt, 0, i_first, K, R, C);
  }
}

// din: (B, Tn, C) accumulated (the static backward wrote it); dz: (B·Tn, R) written; dup: (C·K, R) accumulated;
// dout, in: (B, Tn, C); z: (B·Tn, R); up: (C·K, R). With g_t[c, i] = dout[t, c] · in[t − (K−1) + i, c] (the
// gradient of Δ_t, zero before the sequence start):
//   din[s, c]      += Σ_{i, t = s+(K−1)−i < Tn} Δ_t[c, i] · dout[t, c]
//   dz[t, r]        = Σ_i Σ_c g_t[c, i] · U[c·K + i, r]    (per channel lane over the blocks, then the lanes in order)
//   dU[c·K + i, r] += Σ_t g_t[c, i] · z_t[r]               (tokens in order, per channel)
template <class T>
void dynamic_conv_lowrank_backward(T* din, T* dz, T* dup, const T* dout, const T* in, const T* z, const T* up, int B,
                                   int Tn, int C, int K, int R) {
  using namespace dynamic_lowrank_detail;
  CANONLAB_CHECK(K > 0 && C > 0 && R > 0, "dynamic_conv_lowrank: K, C and R must be positive");
  const std::vector<T> ut = transpose_up(up, C, K, R);
  const long rows = (long)B * Tn;
  const int full = C / kBlock * kBlock;
  // 1. per token s: din through the later tokens' taps that read s, and dz of s itself
#pragma omp parallel
  {
    std::vector<T> p((size_t)R * kBlock), p_tail(R);  // dz's lane sums (R, kBlock) and those of the last channels
#pragma omp for schedule(static)
    for (long row = 0; row < rows; row++) {
      const int s = int(row % Tn);
      const int i_din = std::max(0, s + (K - 1) - (Tn - 1));  // taps whose reader is past the sequence end: none
      const long reader = row + (K - 1) - i_din;  // the token that reads s with tap i_din; tap i's is reader − (i − i_din)
      const int i_first = std::max(0, K - 1 - s);
      const T* x = in + (row - (K - 1) + i_first) * C;  // the row s's own tap i_first reads
      const T* g = dout + row * C;
      T* dn = din + row * C;
      std::fill(p.begin(), p.end(), T(0));
      std::fill(p_tail.begin(), p_tail.end(), T(0));
      int c = 0;
      for (; c < full; c += kBlock) {
        taps_block<kBlock>(dn + c, ut.data() + c, dout + reader * C + c, -C, z + reader * R, -R, i_din, K, R, C);
        dz_block<kBlock>(p.data(), g + c, x + c, ut.data() + c, i_first, K, R, C);
      }
      for (; c < C; c++) {
        taps_block<1>(dn + c, ut.data() + c, dout + reader * C + c, -C, z + reader * R, -R, i_din, K, R, C);
        dz_block<1>(p_tail.data(), g + c, x + c, ut.data() + c, i_first, K, R, C);
      }
      for (int r = 0; r < R; r++) {
        T sum = T(0);
        for (int w = 0; w < kBlock; w++) sum += p[(size_t)r * kBlock + w];
        dz[row * R + r] = sum + p_tail[r];
      }
    }
  }
  // 2. dU: each thread owns blocks of channels (the last C % kBlock channels one per block) and walks every token
  const int blocks = full / kBlock + (C - full);
#pragma omp parallel
  {
    std::vector<T> acc((size_t)K * R * kBlock);  // (K, R, W)
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
      const bool wide = blk < full / kBlock;
      const int c0 = wide ? blk * kBlock : full + (blk - full / kBlock), width = wide ? kBlock : 1;
      std::fill(acc.begin(), acc.end(), T(0));
      for (long row = 0; row < rows; row++) {
        const int i_first = std::max(0, K - 1 - int(row % Tn));
        const T* g = dout + row * C + c0;
        const T* x = in + (row - (K - 1) + i_first) * C + c0;
        if (wide) du_block<kBlock>(acc.data(), g, x, z + row * R, i_first, K, R, C);
        else du_block<1>(acc.data(), g, x, z + row * R, i_first, K, R, C);
      }
      for (int w = 0; w < width; w++)
        for (int i = 0; i < K; i++)
          for (int r = 0; r < R; r++)
            dup[((size_t)(c0 + w) * K + i) * R + r] += acc[((size_t)i * R + r) * width + w];
    }
  }
}

}  // namespace canonlab
