#pragma once
// The bias and activation stage of the linear families' short convolution (nn/short_conv.h): the depthwise
// causal conv itself is canon_conv with groups = channels; around it, y = act(conv + bias) written into a
// column block of a wider row, and in backward the activation's gradient and the bias gradient. One file:
// the loops are the reference (rows independent; the bias sum per channel in row order, in double).
#include <algorithm>
#include <cstddef>

#include "engine/ops/activation/activation.h"

namespace canonlab {

// pre: (N, C) the conv output, bias added in place when bias is non-null; y: (N, C) rows of stride ldy =
// silu(pre) or pre. The same arithmetic as silu_forward.
template <class T>
void short_conv_bias_act_forward(T* y, int ldy, T* pre, const T* bias, int N, int C, bool silu) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < size_t(N); r++) {
    T* p = pre + r * C;
    T* yr = y + r * ldy;
    if (bias)
      for (int c = 0; c < C; c++) p[c] += bias[c];
    if (silu)
      for (int c = 0; c < C; c++) yr[c] = p[c] * sigmoid(p[c]);
    else
      std::copy(p, p + C, yr);
  }
}

// dpre: (N, C) written = dy ⊙ silu'(pre), or dy without the activation; dy: (N, C) rows of stride lddy.
// The same arithmetic as silu_backward.
template <class T>
void short_conv_act_backward(T* dpre, const T* dy, int lddy, const T* pre, int N, int C, bool silu) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < size_t(N); r++) {
    const T* dyr = dy + r * lddy;
    T* dr = dpre + r * C;
    if (silu) {
      const T* p = pre + r * C;
      for (int c = 0; c < C; c++) {
        const T s = sigmoid(p[c]);
        dr[c] = dyr[c] * s * (T(1) + p[c] * (T(1) - s));
      }
    } else {
      std::copy(dyr, dyr + C, dr);
    }
  }
}

// db: (C) += Σ_rows dpre, dpre: (N, C). Each channel is summed over the rows in order by one thread (the same
// bits for any thread count); a block of kBiasBlock channels per work item keeps the row reads contiguous.
template <class T>
void short_conv_bias_backward(T* db, const T* dpre, int N, int C) {
  constexpr int kBiasBlock = 16;
  const int nblk = (C + kBiasBlock - 1) / kBiasBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * kBiasBlock, cb = std::min(kBiasBlock, C - c0);
    double acc[kBiasBlock] = {};
    for (size_t r = 0; r < size_t(N); r++) {
      const T* row = dpre + r * C + c0;
      for (int j = 0; j < cb; j++) acc[j] += double(row[j]);
    }
    for (int j = 0; j < cb; j++) db[c0 + j] += T(acc[j]);
  }
}

}  // namespace canonlab
