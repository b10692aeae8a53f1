#pragma once
// The token shift (token_shift.h) as element kernels: the GPU's algorithm (cuda.cu runs them one thread per element),
// which the CPU also runs (HostLaunch), so the two give the same bits.
#include <cstddef>
#include <string>

#include "engine/error.h"
#include "engine/ops/element_kernels.h"

namespace canonlab {

enum class TokenShiftKind : int { replace, partial, smeared, kv };

struct TokenShift {
  TokenShiftKind kind = TokenShiftKind::replace;
  int offset = 1;      // o >= 1
  int d0 = 0, d1 = 0;  // the head dims it acts on: [d0, d1), 0 <= d0 < d1 <= D
};

// Learned coefficients of a kind: smeared α (H), kv (2, H), none for the fixed kinds.
inline int token_shift_coef_count(TokenShiftKind kind, int H) {
  return kind == TokenShiftKind::smeared ? H : kind == TokenShiftKind::kv ? 2 * H : 0;
}
// Doubles of scratch the backward's coefficient sums need (kRowBlocks partials per coefficient).
inline size_t token_shift_backward_scratch_size(TokenShiftKind kind, int H) {
  return size_t(kRowBlocks) * size_t(token_shift_coef_count(kind, H) > 0 ? token_shift_coef_count(kind, H) : 1);
}

inline void check_token_shift(const TokenShift& s, int D) {
  CANONLAB_CHECK(s.offset >= 1, "token_shift: offset must be >= 1, got " + std::to_string(s.offset));
  CANONLAB_CHECK(s.d0 >= 0 && s.d0 < s.d1 && s.d1 <= D, "token_shift: head dims [" + std::to_string(s.d0) + ", " +
                                                            std::to_string(s.d1) + ") are not a range inside [0, " +
                                                            std::to_string(D) + ")");
}

// The taps of head h: y = now · x[t] + prev · x[t − o] (t >= o), early · x[t] (t < o). U: the arithmetic's type.
template <class U>
struct TokenShiftTaps {
  U now, prev, early;
};
template <class U, class T>
CANONLAB_HD TokenShiftTaps<U> token_shift_taps(TokenShiftKind kind, const T* coef, int h, int H) {
  switch (kind) {
    case TokenShiftKind::smeared: {
      const U s = hd_sigmoid(U(coef[h]));
      return {s, U(1) - s, U(1)};
    }
    case TokenShiftKind::kv: return {U(coef[h]), U(coef[H + h]), U(coef[h])};
    case TokenShiftKind::partial: return {U(0), U(1), U(1)};
    default: return {U(0), U(1), U(0)};
  }
}

// One shifted element: `now` = x[t], `prev` = x[t − o] (read only when has_prev, t >= o). The forward kernel and
// the decoding step (nn/attention.h) both compute it here, so decoding repeats the forward's bits.
template <class T>
CANONLAB_HD T token_shift_value(TokenShiftKind kind, const T* coef, int h, int H, T now, T prev, bool has_prev) {
  if (kind == TokenShiftKind::replace) return has_prev ? prev : T(0);
  if (kind == TokenShiftKind::partial) return has_prev ? prev : now;
  const TokenShiftTaps<T> k = token_shift_taps<T, T>(kind, coef, h, H);
  return has_prev ? k.now * now + k.prev * prev : k.early * now;
}

namespace token_shift_elements {

// Element i of a (B·Tn, H·D) grid: row n = b·Tn + t, channel c = h·D + d; `shifted` when d is in [d0, d1).
struct Site {
  size_t n;
  int c, h, t;
  bool shifted;
};
CANONLAB_HD inline Site site_of(size_t i, const TokenShift& s, int Tn, int H, int D) {
  const size_t n = i / (size_t)(H * D);
  const int c = int(i % (size_t)(H * D)), d = c % D;
  return {n, c, c / D, int(n % Tn), d >= s.d0 && d < s.d1};
}

// One output element each.
template <class T>
struct Forward {
  T* y;
  const T* x;
  const T* coef;
  TokenShift s;
  int ldy, ldx, Tn, H, D;
  CANONLAB_HD void operator()(size_t i) const {
    const auto [n, c, h, t, shifted] = site_of(i, s, Tn, H, D);
    const T now = x[n * ldx + c];
    T out = now;
    if (shifted) {
      const bool has_prev = t >= s.offset;
      out = token_shift_value(s.kind, coef, h, H, now, has_prev ? x[(n - s.offset) * ldx + c] : T(0), has_prev);
    }
    y[n * ldy + c] = out;
  }
};

// dx[t] = a·dy[t] (e·dy[t] for t < o) + c·dy[t + o] (while t + o < Tn), in the head dims; dy elsewhere.
template <class T>
struct BackwardInput {
  T* dx;
  const T* dy;
  const T* coef;
  TokenShift s;
  int lddx, lddy, Tn, H, D;
  CANONLAB_HD void operator()(size_t i) const {
    const auto [n, c, h, t, shifted] = site_of(i, s, Tn, H, D);
    const T g = dy[n * lddy + c];
    T out = g;
    if (shifted) {
      const bool has_next = t + s.offset < Tn;
      const T next = has_next ? dy[(n + s.offset) * lddy + c] : T(0);
      if (s.kind == TokenShiftKind::replace) out = next;
      else if (s.kind == TokenShiftKind::partial) out = t < s.offset ? g + next : next;
      else {
        const TokenShiftTaps<T> k = token_shift_taps<T, T>(s.kind, coef, h, H);
        out = (t >= s.offset ? k.now : k.early) * g;
        if (has_next) out += k.prev * next;
      }
    }
    dx[n * lddx + c] = out;
  }
};

// Row n's contribution to coefficient j, in double: smeared σ(1 − σ) Σ_d (x[t] − x[t − o]) dy[t] (t >= o); kv j < H:
// Σ_d x[t] dy[t]; kv j >= H: Σ_d x[t − o] dy[t] (t >= o).
template <class T>
struct CoefTerm {
  const T* dy;
  const T* x;
  const T* coef;
  TokenShift s;
  int lddy, ldx, Tn, H, D;
  CANONLAB_HD double operator()(int n, int j) const {
    const int h = j % H, t = n % Tn;
    const bool prev_term = s.kind == TokenShiftKind::smeared || j >= H;
    if (prev_term && t < s.offset) return 0.0;
    const T* g = dy + (size_t)n * lddy + (size_t)h * D;
    const T* xn = x + (size_t)n * ldx + (size_t)h * D;
    const T* xp = xn - (size_t)s.offset * ldx;
    double sum = 0;
    for (int d = s.d0; d < s.d1; d++) {
      const double v = s.kind == TokenShiftKind::smeared ? double(xn[d]) - double(xp[d])
                       : j < H                            ? double(xn[d])
                                                          : double(xp[d]);
      sum += v * double(g[d]);
    }
    if (s.kind == TokenShiftKind::smeared) {
      const double sg = hd_sigmoid(double(coef[h]));
      sum *= sg * (1.0 - sg);
    }
    return sum;
  }
};

}  // namespace token_shift_elements

template <class T, class Launch>
void token_shift_forward_elements(const Launch& launch, T* y, int ldy, const T* x, int ldx, const T* coef,
                                  const TokenShift& s, int B, int Tn, int H, int D) {
  launch((size_t)B * Tn * H * D, token_shift_elements::Forward<T>{y, x, coef, s, ldy, ldx, Tn, H, D});
}

// partial: token_shift_backward_scratch_size(s.kind, H) doubles (unused by the fixed kinds).
template <class T, class Launch>
void token_shift_backward_elements(const Launch& launch, T* dx, int lddx, T* dcoef, const T* dy, int lddy, const T* x,
                                   int ldx, const T* coef, const TokenShift& s, int B, int Tn, int H, int D,
                                   double* partial) {
  launch((size_t)B * Tn * H * D, token_shift_elements::BackwardInput<T>{dx, dy, coef, s, lddx, lddy, Tn, H, D});
  const int J = token_shift_coef_count(s.kind, H);
  if (J > 0)
    column_sums(launch, dcoef, partial, B * Tn, J,
                token_shift_elements::CoefTerm<T>{dy, x, coef, s, lddy, ldx, Tn, H, D});
}

}  // namespace canonlab
