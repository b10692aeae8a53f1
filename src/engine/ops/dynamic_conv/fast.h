#pragma once
// The dynamic term of a dynamic Canon layer (naive.h has the definition), threaded over tokens. Every output
// element is one token's own sum over K taps, so there is no reduction across threads: the result does not depend
// on the thread count. Channels are processed in tiles with a float accumulator per channel, the taps in ascending
// order, and the tile's sum is added to the output once, so a zero delta adds exactly zero to the static result.
#include <algorithm>
#include <cstddef>

#include "engine/error.h"

namespace canonlab {

namespace dynamic_conv_detail {
constexpr int kChannelTile = 64;  // channels per accumulator tile
}  // namespace dynamic_conv_detail

// out, in: (B, Tn, C); delta: (B, Tn, C, K)
// out[b, t, c] += Σ_{i < K, t−(K−1)+i >= 0} delta[b, t, c, i] · in[b, t − (K−1) + i, c]
template <class T>
void dynamic_conv_forward(T* out, const T* in, const T* delta, int B, int Tn, int C, int K) {
  using namespace dynamic_conv_detail;
  CANONLAB_CHECK(K > 0 && C > 0, "dynamic_conv: K and C must be positive");
  const long rows = (long)B * Tn;
#pragma omp parallel for schedule(static)
  for (long row = 0; row < rows; row++) {
    const int t = int(row % Tn);
    const T* inb = in + (row - t) * C;      // (Tn, C): this token's sequence
    const T* d = delta + row * C * K;       // (C, K)
    T* o = out + row * C;                   // (C)
    const int i_first = std::max(0, K - 1 - t);  // taps before the sequence start read zero
    for (int c0 = 0; c0 < C; c0 += kChannelTile) {
      const int cb = std::min(kChannelTile, C - c0);
      T acc[kChannelTile] = {};
      for (int i = i_first; i < K; i++) {
        const T* x = inb + (size_t)(t - (K - 1) + i) * C + c0;
        const T* di = d + (size_t)c0 * K + i;
        for (int cc = 0; cc < cb; cc++) acc[cc] += di[(size_t)cc * K] * x[cc];
      }
      for (int cc = 0; cc < cb; cc++) o[c0 + cc] += acc[cc];
    }
  }
}

// din: (B, Tn, C) accumulated (the static backward wrote it); ddelta: (B, Tn, C, K) written; dout, in: (B, Tn, C);
// delta: (B, Tn, C, K)
//   din[b, s, c]       += Σ_{i, t = s+(K−1)−i < Tn} delta[b, t, c, i] · dout[b, t, c]
//   ddelta[b, t, c, i]  = dout[b, t, c] · in[b, t − (K−1) + i, c]   (0 where that time is before 0)
template <class T>
void dynamic_conv_backward(T* din, T* ddelta, const T* dout, const T* in, const T* delta, int B, int Tn, int C,
                           int K) {
  using namespace dynamic_conv_detail;
  CANONLAB_CHECK(K > 0 && C > 0, "dynamic_conv: K and C must be positive");
  const long rows = (long)B * Tn;
#pragma omp parallel for schedule(static)
  for (long row = 0; row < rows; row++) {
    const int s = int(row % Tn);
    const size_t seq = size_t(row - s);  // first row of this token's sequence
    // din at s gathers the taps of the later tokens t = s + (K−1) − i that read s
    const int i_first = std::max(0, s + (K - 1) - (Tn - 1));
    for (int c0 = 0; c0 < C; c0 += kChannelTile) {
      const int cb = std::min(kChannelTile, C - c0);
      T acc[kChannelTile] = {};
      for (int i = i_first; i < K; i++) {
        const size_t trow = seq + size_t(s + (K - 1) - i);
        const T* g = dout + trow * C + c0;
        const T* di = delta + (trow * C + c0) * K + i;
        for (int cc = 0; cc < cb; cc++) acc[cc] += di[(size_t)cc * K] * g[cc];
      }
      T* dn = din + (size_t)row * C + c0;
      for (int cc = 0; cc < cb; cc++) dn[cc] += acc[cc];
    }
    // ddelta at token s (as the output time): the outer product of dout and the K inputs it read
    const T* g = dout + (size_t)row * C;
    T* dd = ddelta + (size_t)row * C * K;
    for (int c = 0; c < C; c++)
      for (int i = 0; i < K; i++) {
        const int src = s - (K - 1) + i;
        dd[(size_t)c * K + i] = src < 0 ? T(0) : g[c] * in[(seq + src) * C + c];
      }
  }
}

}  // namespace canonlab
