#pragma once
// Rotary position embedding, rotate-half convention, in place. Naive and fast are the same code: every
// element is touched once and independently, so the only thing to get right is computing each angle once.
// Angles are formed in double (t · base^(-2i/r)) and rounded to T only as cos/sin, so float runs lose no
// accuracy at large t.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/error.h"

namespace canonlab {

namespace rope_detail {

// direction = +1 rotates by theta (forward), -1 by -theta (the transpose, for backward).
// Row t of x sits at position first_position + t.
template <class T>
void rope_rotate(T* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base, double direction,
                 int first_position = 0) {
  CANONLAB_CHECK(rope_dim % 2 == 0 && rope_dim >= 0 && rope_dim <= D, "rope: rope_dim must be even and <= head dim");
  const int half = rope_dim / 2;
  if (half == 0) return;
  // Blocks of frequencies keep the cos/sin tables on the stack whatever rope_dim is.
  constexpr int IB = 32;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < Tn; t++) {
    T cs[IB], sn[IB];
    for (int i0 = 0; i0 < half; i0 += IB) {
      const int ib = std::min(IB, half - i0);
      for (int ii = 0; ii < ib; ii++) {
        double angle = double(first_position + t) * std::pow(base, -2.0 * double(i0 + ii) / double(rope_dim));
        cs[ii] = T(std::cos(angle));
        sn[ii] = T(direction * std::sin(angle));
      }
      for (int b = 0; b < B; b++) {
        T* row = x + ((size_t)b * Tn + t) * (size_t)ld;
        for (int h = 0; h < H; h++) {
          // x1, x2: the two halves of the rotated part of head h
          T* x1 = row + (size_t)h * D + i0;
          T* x2 = x1 + half;
          for (int ii = 0; ii < ib; ii++) {
            T a = x1[ii], c = x2[ii];
            x1[ii] = a * cs[ii] - c * sn[ii];
            x2[ii] = c * cs[ii] + a * sn[ii];
          }
        }
      }
    }
  }
}

}  // namespace rope_detail

// x: (B, Tn, H, D) token rows of stride ld, rotated in place on the first rope_dim dims of each head:
// for i < r/2, theta = t · base^(-2i/r), (x[i], x[i+r/2]) <- (x[i] cos - x[i+r/2] sin, x[i+r/2] cos + x[i] sin)
template <class T>
void rope_forward(T* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base) {
  rope_detail::rope_rotate(x, ld, B, Tn, H, D, rope_dim, base, 1.0);
}

// One token at `position` (decoding): x: (H, D), rotated in place like row `position` of rope_forward.
template <class T>
void rope_forward_at(T* x, int position, int H, int D, int rope_dim, double base) {
  rope_detail::rope_rotate(x, H * D, 1, 1, H, D, rope_dim, base, 1.0, position);
}

// dx: (B, Tn, H, D) token rows of stride ld, in place: the rotation is orthogonal, so its transpose is the
// rotation by -theta.
template <class T>
void rope_backward(T* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base) {
  rope_detail::rope_rotate(dx, ld, B, Tn, H, D, rope_dim, base, -1.0);
}

}  // namespace canonlab
