#pragma once
// Grouped-query attention (model.n_kv_heads): each of `heads` key/value heads serves `group` consecutive query
// heads, query head j reading key/value head j / group (Hugging Face's repeat_kv order). Attention runs on the
// repeated heads, so every attention kernel (CPU, CUDA, cuDNN) and the probes' per-query-head maps stay as they are:
//   forward:  y[n, (h·group + g)·D + d] = x[n, h·D + d]               x: (N, heads·D), y: (N, heads·group·D)
//   backward: dx[n, h·D + d] = Σ_g dy[n, (h·group + g)·D + d]          summed in g order, in double
// Rows of stride ldx, ldy (the attention layer's [q | k | v] buffers). The forward copies (any value exactly); the
// backward's sum has a fixed order, so the bits depend on neither threads nor device. dx is written.
//
// repeat_heads_forward / repeat_heads_backward here are the CPU's: the element kernels (element_kernels.h, the GPU's
// algorithm) run on the host. repeat_heads_*_naive is the reference: plain loops.
#include "engine/ops/element_kernels.h"
#include "engine/ops/repeat_heads/element_kernels.h"

namespace canonlab {

template <class T>
void repeat_heads_forward(T* y, int ldy, const T* x, int ldx, int N, int heads, int group, int D) {
  check_repeat_heads(heads, group, D);
  repeat_heads_forward_elements(HostLaunch{}, y, ldy, x, ldx, N, heads, group, D);
}

template <class T>
void repeat_heads_backward(T* dx, int lddx, const T* dy, int lddy, int N, int heads, int group, int D) {
  check_repeat_heads(heads, group, D);
  repeat_heads_backward_elements(HostLaunch{}, dx, lddx, dy, lddy, N, heads, group, D);
}

// ---- reference ----

template <class T>
void repeat_heads_forward_naive(T* y, int ldy, const T* x, int ldx, int N, int heads, int group, int D) {
  for (int n = 0; n < N; n++)
    for (int h = 0; h < heads; h++)
      for (int g = 0; g < group; g++)
        for (int d = 0; d < D; d++)
          y[size_t(n) * ldy + size_t(h * group + g) * D + d] = x[size_t(n) * ldx + size_t(h) * D + d];
}

template <class T>
void repeat_heads_backward_naive(T* dx, int lddx, const T* dy, int lddy, int N, int heads, int group, int D) {
  for (int n = 0; n < N; n++)
    for (int h = 0; h < heads; h++)
      for (int d = 0; d < D; d++) {
        double sum = 0;
        for (int g = 0; g < group; g++) sum += double(dy[size_t(n) * lddy + size_t(h * group + g) * D + d]);
        dx[size_t(n) * lddx + size_t(h) * D + d] = T(sum);
      }
}

}  // namespace canonlab
