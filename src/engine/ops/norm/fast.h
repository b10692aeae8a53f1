#pragma once
// RMSNorm and LayerNorm, threaded over rows. Parameter gradients are a second pass threaded over blocks of
// channels: each channel is summed over all rows, in row order, by one thread, so dw/db are the same for any
// thread count and no per-thread scratch is needed.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/ops/vec_math.h"

namespace canonlab {

namespace norm_detail {
// 16 floats = one cache line, so two threads never write the same line of dw/db.
constexpr int kChannelBlock = 16;
}  // namespace norm_detail

// One row of each op below (yn, xn, dxn, dyn: (C)), shared with the fused Canon op (canon_conv/fused.h) so
// both give the same bits. yn may alias xn, and dxn dyn.
template <class T>
inline T rmsnorm_forward_row(T* yn, const T* xn, const T* w, int C, T eps) {
  const double ss = vec_dot_wide(xn, xn, C);
  T r = T(1.0 / std::sqrt(ss / C + double(eps)));
  if (w)
    for (int c = 0; c < C; c++) yn[c] = xn[c] * r * w[c];
  else
    for (int c = 0; c < C; c++) yn[c] = xn[c] * r;
  return r;
}

template <class T>
inline void rmsnorm_backward_row(T* dxn, const T* dyn, const T* xn, const T* w, T r, int C) {
  // dx = r (g - x r² mean(g ⊙ x)), g = w ⊙ dy
  const double gx = w ? vec_lane_sum<double>(C, [&](int c) { return double(dyn[c] * w[c]) * double(xn[c]); })
                       : vec_dot_wide(dyn, xn, C);
  T k = T(gx / C) * r * r;
  if (w)
    for (int c = 0; c < C; c++) dxn[c] = r * (dyn[c] * w[c] - xn[c] * k);
  else
    for (int c = 0; c < C; c++) dxn[c] = r * (dyn[c] - xn[c] * k);
}

template <class T>
inline void layernorm_forward_row(T* yn, T& mean, T& rstd, const T* xn, const T* w, const T* b, int C, T eps) {
  // Two passes (mean, then centred squares): one-pass E[x²] - E[x]² cancels badly when |mean| >> std.
  const double s = vec_lane_sum<double>(C, [&](int c) { return double(xn[c]); });
  const double m = s / C;
  const double var = vec_lane_sum<double>(C, [&](int c) { return (double(xn[c]) - m) * (double(xn[c]) - m); });
  T r = T(1.0 / std::sqrt(var / C + double(eps)));
  T mt = T(m);
  for (int c = 0; c < C; c++) {
    T v = (xn[c] - mt) * r;
    if (w) v *= w[c];
    if (b) v += b[c];
    yn[c] = v;
  }
  mean = mt;
  rstd = r;
}

template <class T>
inline void layernorm_backward_row(T* dxn, const T* dyn, const T* xn, const T* w, T m, T r, int C) {
  // dx = r (g - mean(g) - xhat mean(g ⊙ xhat)), g = w ⊙ dy, xhat = (x - mean) r
  const auto g = [&](int c) { return w ? dyn[c] * w[c] : dyn[c]; };
  const double gs = vec_lane_sum<double>(C, [&](int c) { return double(g(c)); });
  const double gxs = vec_lane_sum<double>(C, [&](int c) { return double(g(c)) * double((xn[c] - m) * r); });
  T gm = T(gs / C), gxm = T(gxs / C);
  for (int c = 0; c < C; c++) dxn[c] = r * (g(c) - gm - (xn[c] - m) * r * gxm);
}

// y, x: (N, C); rstd: (N) saved for backward; w: (C) or nullptr
template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int N, int C, T eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) rstd[n] = rmsnorm_forward_row(y + (size_t)n * C, x + (size_t)n * C, w, C, eps);
}

// The residual add before a norm and the norm in one pass over each row (a block's x_mid = x + mixer(x), then
// mlp_norm(x_mid)): sum = a + b, y = rmsnorm(sum). The same bits as add() then rmsnorm_forward(); sum may alias a or
// b, y may not alias sum.
template <class T>
void add_rmsnorm_forward(T* sum, T* y, T* rstd, const T* a, const T* b, const T* w, int N, int C, T eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T* sn = sum + (size_t)n * C;
    const T* an = a + (size_t)n * C;
    const T* bn = b + (size_t)n * C;
    for (int c = 0; c < C; c++) sn[c] = an[c] + bn[c];
    rstd[n] = rmsnorm_forward_row(y + (size_t)n * C, sn, w, C, eps);
  }
}

// dx: (N, C) written; dw: (C) accumulated when w and dw are non-null. dres: (N, C) or nullptr, a gradient that
// reaches x along another path (the residual stream), added to dx in the same pass: the same bits as
// rmsnorm_backward() then add_into(dx, dres). dres may not alias dx.
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int N, int C,
                      const T* dres = nullptr) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T* dxn = dx + (size_t)n * C;
    rmsnorm_backward_row(dxn, dy + (size_t)n * C, x + (size_t)n * C, w, rstd[n], C);
    if (dres) {
      const T* rn = dres + (size_t)n * C;
      for (int c = 0; c < C; c++) dxn[c] += rn[c];
    }
  }
  if (!(w && dw)) return;
  constexpr int CB = norm_detail::kChannelBlock;
  int nblocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * CB, cb = std::min(CB, C - c0);
    double acc[CB] = {};
    for (int n = 0; n < N; n++) {
      const T* dyn = dy + (size_t)n * C + c0;
      const T* xn = x + (size_t)n * C + c0;
      double r = rstd[n];
      for (int j = 0; j < cb; j++) acc[j] += double(dyn[j]) * double(xn[j]) * r;
    }
    for (int j = 0; j < cb; j++) dw[c0 + j] += T(acc[j]);
  }
}

// y, x: (N, C); mean, rstd: (N) saved for backward; w, b: (C) or nullptr
template <class T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C, T eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    layernorm_forward_row(y + (size_t)n * C, mean[n], rstd[n], x + (size_t)n * C, w, b, C, eps);
}

// dx: (N, C) written; dw: (C) accumulated when w and dw are non-null; db: (C) accumulated when non-null
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, int N,
                        int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    layernorm_backward_row(dx + (size_t)n * C, dy + (size_t)n * C, x + (size_t)n * C, w, mean[n], rstd[n], C);
  bool do_dw = w && dw;
  if (!do_dw && !db) return;
  constexpr int CB = norm_detail::kChannelBlock;
  int nblocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * CB, cb = std::min(CB, C - c0);
    double accw[CB] = {}, accb[CB] = {};
    for (int n = 0; n < N; n++) {
      const T* dyn = dy + (size_t)n * C + c0;
      const T* xn = x + (size_t)n * C + c0;
      double m = mean[n], r = rstd[n];
      for (int j = 0; j < cb; j++) {
        accw[j] += double(dyn[j]) * (double(xn[j]) - m) * r;
        accb[j] += double(dyn[j]);
      }
    }
    for (int j = 0; j < cb; j++) {
      if (do_dw) dw[c0 + j] += T(accw[j]);
      if (db) db[c0 + j] += T(accb[j]);
    }
  }
}

}  // namespace canonlab
