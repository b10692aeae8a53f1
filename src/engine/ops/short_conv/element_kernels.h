#pragma once
// short_conv.h's bias and activation stage as element kernels (engine/ops/element_kernels.h), for the GPU
// (short_conv/cuda.cu) and checked on the host against short_conv.h (tests/unit/test_ops_linear_glue_elements.cpp).
#include <cstddef>

#include "engine/ops/element_kernels.h"

namespace canonlab {

namespace short_conv_elements {

// pre[n, c] += bias[c]; y[n, c] = silu(pre) or pre.   One element per (n, c).
template <class T>
struct BiasAct {
  T* y;
  int ldy;
  T* pre;
  const T* bias;
  int C;
  bool silu;
  CANONLAB_HD void operator()(size_t i) const {
    const size_t n = i / C;
    const int c = int(i % C);
    T p = pre[i];
    if (bias) {
      p += bias[c];
      pre[i] = p;
    }
    y[n * ldy + c] = silu ? p * hd_sigmoid(p) : p;
  }
};

// dpre[n, c] = dy ⊙ silu'(pre), or dy.   One element per (n, c).
template <class T>
struct ActGrad {
  T* dpre;
  const T* dy;
  int lddy;
  const T* pre;
  int C;
  bool silu;
  CANONLAB_HD void operator()(size_t i) const {
    const T d = dy[i / C * lddy + i % C];
    dpre[i] = silu ? d * hd_silu_grad(pre[i]) : d;
  }
};

template <class T>
struct BiasTerm {
  const T* dpre;
  int C;
  CANONLAB_HD double operator()(int n, int c) const { return double(dpre[(size_t)n * C + c]); }
};

}  // namespace short_conv_elements

template <class T, class Launch>
void short_conv_bias_act_forward_elements(const Launch& launch, T* y, int ldy, T* pre, const T* bias, int N, int C,
                                          bool silu) {
  launch((size_t)N * C, short_conv_elements::BiasAct<T>{y, ldy, pre, bias, C, silu});
}

template <class T, class Launch>
void short_conv_act_backward_elements(const Launch& launch, T* dpre, const T* dy, int lddy, const T* pre, int N, int C,
                                      bool silu) {
  launch((size_t)N * C, short_conv_elements::ActGrad<T>{dpre, dy, lddy, pre, C, silu});
}

// db: (C) += Σ_rows dpre; partial: kRowBlocks · C doubles of scratch.
template <class T, class Launch>
void short_conv_bias_backward_elements(const Launch& launch, T* db, const T* dpre, int N, int C, double* partial) {
  column_sums(launch, db, partial, N, C, short_conv_elements::BiasTerm<T>{dpre, C});
}

}  // namespace canonlab
