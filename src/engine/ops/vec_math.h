#pragma once
// Building blocks for the row loops of fast kernels (softmax rows, activations). Without
// -ffast-math GCC may neither vectorise std::exp nor reorder a float sum, and both dominate a softmax row:
// a scalar expf costs more than the GEMM work per score, and a one-accumulator sum runs at add latency.
// So exp is written as plain arithmetic the vectoriser accepts (its clamps and selects need -fno-trapping-math,
// which the build sets, to be if-converted on AVX2), and reductions keep kLanes partial sums that are combined in a
// fixed order: vectorised, yet the same bits on every run, every thread count and (with -ffp-contract=off) every
// vector width.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace canonlab {

// e^x in float, within 1 ulp of std::exp on [−87, 88] (Cephes polynomial after reducing to
// x = n ln2 + r, |r| <= ln2/2). Saturates outside that range (e^−87 ≈ 1.6e−38 instead of a subnormal or 0,
// e^88 instead of inf); NaN stays NaN.
inline float vec_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // Adding 1.5·2^23 rounds x·log2(e) to an integer n held in the low mantissa bits of t; reading n back from
  // those bits (rather than converting the float to int) keeps the loop vectorisable and a NaN input free of UB.
  const float magic = 12582912.0f;
  const float t = x * 1.44269504088896341f + magic;
  const float n = t - magic;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(magic);
  // ln2 split in two so n·ln2 is exact to float precision
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n built directly in the exponent field (n + 127 is in [1, 254] after the clamps)
  const float scale = std::bit_cast<float>((ni + 127) << 23);
  return p * scale;
}
// double is for gradient checks, where accuracy matters and speed does not
inline double vec_exp(double x) { return std::exp(x); }

// erfc(x) in float, relative error below 4e-7 wherever the result is a normal float (x < 9.1); beyond that
// it returns tiny values instead of subnormals or 0. Numerical Recipes' Chebyshev fit
// erfc(z) = t·exp(−z² + P(t)), t = 1/(1 + z/2), for z >= 0, and erfc(−z) = 2 − erfc(z). z² is split into
// hi + lo with an FMA so the large exponent costs no accuracy.
inline float vec_erfc(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float hi = z * z;
  const float lo = std::fma(z, z, -hi);
  const float r = t * vec_exp(-hi) * vec_exp(p - lo);
  return x < 0.0f ? 2.0f - r : r;
}
inline double vec_erfc(double x) { return std::erfc(x); }

namespace vec_detail {
constexpr int kLanes = 16;  // one AVX-512 register of floats, two AVX2 registers
}

template <class T>
T vec_sum(const T* x, int n) {
  constexpr int L = vec_detail::kLanes;
  T acc[L] = {};
  int i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; j++) acc[j] += x[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] += x[i];
  T s = 0;
  for (int j = 0; j < L; j++) s += acc[j];
  return s;
}

template <class T>
T vec_dot(const T* x, const T* y, int n) {
  constexpr int L = vec_detail::kLanes;
  T acc[L] = {};
  int i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; j++) acc[j] += x[i + j] * y[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] += x[i] * y[i];
  T s = 0;
  for (int j = 0; j < L; j++) s += acc[j];
  return s;
}

// Σ exp(x[i] − shift), the exponentials in T, the sum in double lanes. The exponentials go through a small
// buffer because GCC vectorises vec_exp in a plain loop but not inside the unrolled lane pattern.
template <class T>
double vec_sum_exp(const T* x, int n, T shift) {
  constexpr int L = vec_detail::kLanes, CH = 256;
  double acc[L] = {};
  T e[CH];
  for (int i0 = 0; i0 < n; i0 += CH) {
    const int m = n - i0 < CH ? n - i0 : CH;
    for (int j = 0; j < m; j++) e[j] = vec_exp(x[i0 + j] - shift);
    int j = 0;
    for (; j + L <= m; j += L)
      for (int l = 0; l < L; l++) acc[l] += double(e[j + l]);
    for (int l = 0; j < m; j++, l++) acc[l] += double(e[j]);
  }
  double s = 0;
  for (int l = 0; l < L; l++) s += acc[l];
  return s;
}

// n >= 1. Max is exact in any order; the lanes are only there to let it vectorise.
template <class T>
T vec_max(const T* x, int n) {
  constexpr int L = vec_detail::kLanes;
  T acc[L];
  for (int j = 0; j < L; j++) acc[j] = x[0];
  int i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  for (int j = 0; i < n; i++, j++) acc[j] = x[i] > acc[j] ? x[i] : acc[j];
  T m = acc[0];
  for (int j = 1; j < L; j++) m = acc[j] > m ? acc[j] : m;
  return m;
}

}  // namespace canonlab
