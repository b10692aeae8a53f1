#pragma once
// The token-shift family on keys and values (docs/token-shift.md; model.attention.key_shift.mode): a two-tap causal
// filter along time, per head, on the head dims [d0, d1) (the others pass through):
//   y[t] = a_h · x[t] + c_h · x[t − o]   for t >= o
//   y[t] = e_h · x[t]                    for t < o (nothing to shift in)
//   kind      a_h            c_h            e_h   learned coefficients (coef)
//   replace   0              1              0     none: y[t] = x[t − o], zeros before (the key reads only the past)
//   partial   0              1              1     none: the key at t replaced by the key at t − o (modded-nanogpt)
//   smeared   σ(α_h)         1 − σ(α_h)     1     α: (H)       (Olsson et al. 2022, the first keys unchanged)
//   kv        coef[0, h]     coef[1, h]     a_h   (2, H)       (Xu et al. 2025: Shift zero-pads the front)
// x, y: (B, Tn, H, D) token rows of stride ldx, ldy. The fixed kinds copy (no arithmetic), so they carry any value
// exactly. Backward: dx written; dcoef accumulated, summed over 64 fixed row blocks in order (element_kernels.h's
// column_sums), so the bits do not depend on threads or device.
//
// token_shift_forward / token_shift_backward here are the CPU's: the element kernels (element_kernels.h, the GPU's
// algorithm) run on the host. token_shift_*_naive is the reference: plain loops, sums in double.
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "engine/ops/element_kernels.h"
#include "engine/ops/token_shift/element_kernels.h"

namespace canonlab {

template <class T>
void token_shift_forward(T* y, int ldy, const T* x, int ldx, const T* coef, const TokenShift& shift, int B, int Tn,
                         int H, int D) {
  check_token_shift(shift, D);
  token_shift_forward_elements(HostLaunch{}, y, ldy, x, ldx, coef, shift, B, Tn, H, D);
}

template <class T>
void token_shift_backward(T* dx, int lddx, T* dcoef, const T* dy, int lddy, const T* x, int ldx, const T* coef,
                          const TokenShift& shift, int B, int Tn, int H, int D) {
  check_token_shift(shift, D);
  std::vector<double> partial(token_shift_backward_scratch_size(shift.kind, H));
  token_shift_backward_elements(HostLaunch{}, dx, lddx, dcoef, dy, lddy, x, ldx, coef, shift, B, Tn, H, D,
                                partial.data());
}

// ---- reference ----

// Calls f(row, channel, t, h, d, taps) for every element of the (B, Tn, H, D) grid, the taps in double.
template <class T, class F>
void for_each_token_shift_element(const T* coef, const TokenShift& shift, int B, int Tn, int H, int D, F&& f) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int h = 0; h < H; h++) {
        const TokenShiftTaps<double> k = token_shift_taps<double, T>(shift.kind, coef, h, H);
        for (int d = 0; d < D; d++) f(size_t(b) * Tn + t, size_t(h) * D + d, t, h, d, k);
      }
}

template <class T>
void token_shift_forward_naive(T* y, int ldy, const T* x, int ldx, const T* coef, const TokenShift& shift, int B,
                               int Tn, int H, int D) {
  const int o = shift.offset;
  for_each_token_shift_element(coef, shift, B, Tn, H, D,
                               [&](size_t row, size_t c, int t, int, int d, const TokenShiftTaps<double>& k) {
                                 const double now = double(x[row * ldx + c]);
                                 double out = now;
                                 if (d >= shift.d0 && d < shift.d1)
                                   out = t >= o ? k.now * now + k.prev * double(x[(row - o) * ldx + c]) : k.early * now;
                                 y[row * ldy + c] = T(out);
                               });
}

template <class T>
void token_shift_backward_naive(T* dx, int lddx, T* dcoef, const T* dy, int lddy, const T* x, int ldx, const T* coef,
                                const TokenShift& shift, int B, int Tn, int H, int D) {
  const int o = shift.offset;
  std::vector<double> g(size_t(token_shift_coef_count(shift.kind, H)), 0.0);
  for_each_token_shift_element(coef, shift, B, Tn, H, D,
                               [&](size_t row, size_t c, int t, int h, int d, const TokenShiftTaps<double>& k) {
    const double g_now = double(dy[row * lddy + c]);
    if (d < shift.d0 || d >= shift.d1) {
      dx[row * lddx + c] = T(g_now);
      return;
    }
    double v = (t >= o ? k.now : k.early) * g_now;
    if (t + o < Tn) v += k.prev * double(dy[(row + o) * lddy + c]);
    dx[row * lddx + c] = T(v);
    const double x_now = double(x[row * ldx + c]), x_prev = t >= o ? double(x[(row - o) * ldx + c]) : 0.0;
    if (shift.kind == TokenShiftKind::smeared && t >= o) g[size_t(h)] += k.now * k.prev * (x_now - x_prev) * g_now;
    if (shift.kind == TokenShiftKind::kv) {
      g[size_t(h)] += x_now * g_now;
      g[size_t(H + h)] += x_prev * g_now;
    }
  });
  for (size_t j = 0; j < g.size(); j++) dcoef[j] += T(g[j]);
}

}  // namespace canonlab
