#pragma once
// mamba2_io.h (Mamba2's glue around the SSD scan) as element kernels (engine/ops/element_kernels.h), for the GPU
// (ssd/cuda.cu) and checked on the host against mamba2_io.h (tests/unit/test_ops_linear_glue_elements.cpp). Rows
// are independent; ddt_bias and dD go through the fixed row blocks of column_sums.
#include <cstddef>

#include "engine/ops/element_kernels.h"

namespace canonlab {

namespace mamba2_io_elements {

// One row's outputs [x (Di) | B (GN) | C (GN) | z (Di) | dt (H)], one element per (row, output column).
template <class T>
struct Split {
  T *x, *Bm, *Cm, *z, *dt;
  const T *xbc, *mixed, *dt_bias;
  int ld_xbc, Dp, Di, GN, CD, H;
  CANONLAB_HD void operator()(size_t i) const {
    const int W = 2 * Di + 2 * GN + H, j = int(i % W);
    const size_t n = i / W;
    const T* row = xbc + n * ld_xbc;
    const T* prow = mixed + n * Dp;
    if (j < Di) {
      x[n * Di + j] = row[j];
    } else if (j < Di + GN) {
      Bm[n * GN + (j - Di)] = row[j];
    } else if (j < Di + 2 * GN) {
      Cm[n * GN + (j - Di - GN)] = row[j];
    } else if (j < 2 * Di + 2 * GN) {
      const int c = j - Di - 2 * GN;
      z[n * Di + c] = prow[c];
    } else {
      const int h = j - 2 * Di - 2 * GN;
      dt[n * H + h] = T(hd_softplus(double(prow[Di + CD + h]) + double(dt_bias[h])));
    }
  }
};

template <class T>
struct DecayRates {
  T* A;
  const T* A_log;
  CANONLAB_HD void operator()(size_t h) const { A[h] = T(-hd_exp(double(A_log[h]))); }
};

template <class T>
struct DecayRatesGrad {
  T* dA_log;
  const T *dA, *A;
  CANONLAB_HD void operator()(size_t h) const { dA_log[h] += dA[h] * A[h]; }
};

// y[n, h, p] += D[h] x[n, h, p].   One element per (n, h, p).
template <class T>
struct Skip {
  T* y;
  const T *D, *x;
  int P, H;
  CANONLAB_HD void operator()(size_t i) const { y[i] += D[i / P % H] * x[i]; }
};

// One row's gradients [dxbc: dx + D·dy (Di) | dB (GN) | dC (GN)] and dmixed's [dz (Di) | dt logits (H)], one element
// per (row, column).
template <class T>
struct SplitGrad {
  T *dxbc, *dmixed;
  const T *dx, *dy, *dB, *dC, *dz, *ddt, *mixed, *dt_bias, *D;
  int ld_dxbc, Dp, Di, GN, CD, H, P;
  CANONLAB_HD void operator()(size_t i) const {
    const int W = 2 * Di + 2 * GN + H, j = int(i % W);
    const size_t n = i / W;
    T* row = dxbc + n * ld_dxbc;
    if (j < Di) {
      row[j] = dx[n * Di + j] + D[j / P] * dy[n * Di + j];
    } else if (j < Di + GN) {
      row[j] = dB[n * GN + (j - Di)];
    } else if (j < Di + 2 * GN) {
      row[j] = dC[n * GN + (j - Di - GN)];
    } else if (j < 2 * Di + 2 * GN) {
      const int c = j - Di - 2 * GN;
      dmixed[n * Dp + c] = dz[n * Di + c];
    } else {
      const int h = j - 2 * Di - 2 * GN;
      dmixed[n * Dp + Di + CD + h] = T(dt_logit_grad((int)n, h));
    }
  }
  // ddt · softplus'(dt logit + dt_bias), softplus' = sigmoid
  CANONLAB_HD double dt_logit_grad(int n, int h) const {
    const double pre = double(mixed[(size_t)n * Dp + Di + CD + h]) + double(dt_bias[h]);
    return double(ddt[(size_t)n * H + h]) / (1.0 + hd_exp(-pre));
  }
};

template <class T>
struct DtBiasTerm {
  SplitGrad<T> s;
  CANONLAB_HD double operator()(int n, int h) const { return s.dt_logit_grad(n, h); }
};

template <class T>
struct SkipWeightTerm {
  const T *dy, *x;
  int H, P;
  CANONLAB_HD double operator()(int n, int h) const {
    const size_t at = ((size_t)n * H + h) * P;
    double s = 0;
    for (int p = 0; p < P; p++) s += double(dy[at + p]) * double(x[at + p]);
    return s;
  }
};

}  // namespace mamba2_io_elements

template <class T, class Launch>
void mamba2_split_forward_elements(const Launch& launch, T* x, T* Bm, T* Cm, T* z, T* dt, const T* xbc, int ld_xbc,
                                   const T* mixed, const T* dt_bias, int N, int Dp, int Di, int GN, int CD, int H) {
  launch((size_t)N * (2 * Di + 2 * GN + H),
         mamba2_io_elements::Split<T>{x, Bm, Cm, z, dt, xbc, mixed, dt_bias, ld_xbc, Dp, Di, GN, CD, H});
}

template <class T, class Launch>
void ssd_decay_rates_elements(const Launch& launch, T* A, const T* A_log, int H) {
  launch((size_t)H, mamba2_io_elements::DecayRates<T>{A, A_log});
}

template <class T, class Launch>
void ssd_decay_rates_backward_elements(const Launch& launch, T* dA_log, const T* dA, const T* A, int H) {
  launch((size_t)H, mamba2_io_elements::DecayRatesGrad<T>{dA_log, dA, A});
}

template <class T, class Launch>
void mamba2_skip_forward_elements(const Launch& launch, T* y, const T* D, const T* x, int N, int H, int P) {
  launch((size_t)N * H * P, mamba2_io_elements::Skip<T>{y, D, x, P, H});
}

// mamba2_split_backward's contract; partial: kRowBlocks · H doubles of scratch.
template <class T, class Launch>
void mamba2_split_backward_elements(const Launch& launch, T* dxbc, int ld_dxbc, T* dmixed, T* ddt_bias, T* dD,
                                    const T* dx, const T* dy, const T* dB, const T* dC, const T* dz, const T* ddt,
                                    const T* mixed, const T* dt_bias, const T* D, const T* x, int N, int Dp, int Di,
                                    int GN, int CD, int H, int P, double* partial) {
  using namespace mamba2_io_elements;
  const SplitGrad<T> s{dxbc, dmixed, dx, dy, dB, dC, dz, ddt, mixed, dt_bias, D, ld_dxbc, Dp, Di, GN, CD, H, P};
  launch((size_t)N * (2 * Di + 2 * GN + H), s);
  column_sums(launch, ddt_bias, partial, N, H, DtBiasTerm<T>{s});
  column_sums(launch, dD, partial, N, H, SkipWeightTerm<T>{dy, x, H, P});
}

}  // namespace canonlab
