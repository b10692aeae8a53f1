#pragma once
// Reference for the dynamic term of a dynamic Canon layer (docs/canon-variants.md): a causal depthwise
// convolution whose kernel differs at every position. delta holds each position's per-channel kernel offset
// Δ_t: (C, K), in the static weight's (C, 1, K) layout; tap i looks back K-1-i steps, times before 0 read as zero.
// The op adds to an output the static canon_conv already wrote, so that conv = static + dynamic and a zero Δ
// leaves the static result untouched. Plain loops, one thread, double accumulators.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace canonlab {

// out, in: (B, Tn, C); delta: (B, Tn, C, K)
// out[b, t, c] += Σ_{i < K, t−(K−1)+i >= 0} delta[b, t, c, i] · in[b, t − (K−1) + i, c]
template <class T>
void dynamic_conv_forward_naive(T* out, const T* in, const T* delta, int B, int Tn, int C, int K) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++) {
        const T* d = delta + (((size_t)b * Tn + t) * C + c) * K;
        double acc = 0;
        for (int i = 0; i < K; i++) {
          const int s = t - (K - 1) + i;
          if (s < 0) continue;
          acc += double(d[i]) * double(in[((size_t)b * Tn + s) * C + c]);
        }
        out[((size_t)b * Tn + t) * C + c] += T(acc);
      }
}

// din: (B, Tn, C) accumulated (the static backward wrote it); ddelta: (B, Tn, C, K) written; dout, in: (B, Tn, C);
// delta: (B, Tn, C, K)
//   din[b, s, c]       += Σ_{i, t = s+(K−1)−i < Tn} delta[b, t, c, i] · dout[b, t, c]
//   ddelta[b, t, c, i]  = dout[b, t, c] · in[b, t − (K−1) + i, c]   (0 where that time is before 0)
template <class T>
void dynamic_conv_backward_naive(T* din, T* ddelta, const T* dout, const T* in, const T* delta, int B, int Tn, int C,
                                 int K) {
  for (int b = 0; b < B; b++)
    for (int s = 0; s < Tn; s++)
      for (int c = 0; c < C; c++) {
        double acc = 0;
        for (int i = 0; i < K; i++) {
          const int t = s + (K - 1) - i;
          if (t >= Tn) continue;
          const size_t row = (size_t)b * Tn + t;
          acc += double(delta[(row * C + c) * K + i]) * double(dout[row * C + c]);
        }
        din[((size_t)b * Tn + s) * C + c] += T(acc);
      }
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++)
        for (int i = 0; i < K; i++) {
          const int s = t - (K - 1) + i;
          const size_t row = (size_t)b * Tn + t;
          ddelta[(row * C + c) * K + i] =
              s < 0 ? T(0) : T(double(dout[row * C + c]) * double(in[((size_t)b * Tn + s) * C + c]));
        }
}

// The low-rank form (lowrank.h): the offsets Δ_t = U z_t are formed in double, then the plain ops above run.
// out, in: (B, Tn, C); z: (B·Tn, R); up: (C·K, R)
// Δ: (rows, C·K), Δ[n, j] = Σ_r up[j, r] · z[n, r] in double
template <class T>
std::vector<T> lowrank_offsets_naive(const T* z, const T* up, size_t rows, size_t CK, int R) {
  std::vector<T> delta(rows * CK);
  for (size_t n = 0; n < rows; n++)
    for (size_t j = 0; j < CK; j++) {
      double acc = 0;
      for (int r = 0; r < R; r++) acc += double(up[j * R + r]) * double(z[n * R + r]);
      delta[n * CK + j] = T(acc);
    }
  return delta;
}
template <class T>
void dynamic_conv_lowrank_forward_naive(T* out, const T* in, const T* z, const T* up, int B, int Tn, int C, int K,
                                        int R) {
  const std::vector<T> delta = lowrank_offsets_naive(z, up, (size_t)B * Tn, (size_t)C * K, R);
  dynamic_conv_forward_naive(out, in, delta.data(), B, Tn, C, K);
}
// din accumulated, dz written, dup accumulated: din through dynamic_conv_backward_naive with the formed offsets,
// then dz = ddelta · U and dU += ddeltaᵀ · z in double
template <class T>
void dynamic_conv_lowrank_backward_naive(T* din, T* dz, T* dup, const T* dout, const T* in, const T* z, const T* up,
                                         int B, int Tn, int C, int K, int R) {
  const size_t rows = (size_t)B * Tn, CK = (size_t)C * K;
  const std::vector<T> delta = lowrank_offsets_naive(z, up, rows, CK, R);
  std::vector<T> ddelta(rows * CK);
  dynamic_conv_backward_naive(din, ddelta.data(), dout, in, delta.data(), B, Tn, C, K);
  for (size_t n = 0; n < rows; n++)
    for (int r = 0; r < R; r++) {
      double acc = 0;
      for (size_t j = 0; j < CK; j++) acc += double(ddelta[n * CK + j]) * double(up[j * R + r]);
      dz[n * R + r] = T(acc);
    }
  for (size_t j = 0; j < CK; j++)
    for (int r = 0; r < R; r++) {
      double acc = 0;
      for (size_t n = 0; n < rows; n++) acc += double(ddelta[n * CK + j]) * double(z[n * R + r]);
      dup[j * R + r] += T(acc);
    }
}

// Decoding one token: window (K, C) holds the inputs at t-K+1 .. t, oldest first, already shifted by
// canon_conv_step; out (C) += Σ_i delta[c, i] · window[i, c] with delta: (C, K) the token's kernel offset.
template <class T>
void dynamic_conv_step(T* out, const T* window, const T* delta, int C, int K) {
  for (int c = 0; c < C; c++) {
    double acc = 0;
    for (int i = 0; i < K; i++) acc += double(delta[(size_t)c * K + i]) * double(window[(size_t)i * C + c]);
    out[c] += T(acc);
  }
}

}  // namespace canonlab
