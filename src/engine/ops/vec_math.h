#pragma once
// Building blocks for the row loops of fast kernels (softmax rows, activations). Without
// -ffast-math GCC may neither vectorise std::exp nor reorder a float sum, and both dominate a softmax row:
// a scalar expf costs more than the GEMM work per score, and a one-accumulator sum runs at add latency.
// So exp is written as plain arithmetic the vectoriser accepts (its clamps and selects need -fno-trapping-math,
// which the build sets, to be if-converted on AVX2), and reductions keep kLanes partial sums that are combined in a
// fixed order: vectorised, yet the same bits on every run, every thread count and (with -ffp-contract=off) every
// vector width. The polynomials use explicit std::fma: one rounding per step, so the result is the same in a vector
// lane and in a scalar tail (the build forbids the compiler's own contractions, which could differ between them),
// and on every machine with FMA3 (every AVX2 processor) it is one instruction instead of a multiply and an add.
// Measured against SLEEF 3.5 (docs/engine.md): this exp is as fast as Sleef_finz_expf16_u10 and the erfc below
// 2.9x faster than Sleef_finz_erfcf16_u15 in GELU, at the accuracy stated with each.
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
  const float t = std::fma(x, 1.44269504088896341f, magic);
  const float n = t - magic;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(magic);
  // ln2 split in two so n·ln2 is exact to float precision
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
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
namespace erfc_detail {
// The fit's t = 1/(1 + z/2) and exponent P(t), for z >= 0
inline float fit(float z, float& t) {
  t = 1.0f / std::fma(0.5f, z, 1.0f);
  float p = 0.17087277f;
  p = std::fma(p, t, -0.82215223f);
  p = std::fma(p, t, 1.48851587f);
  p = std::fma(p, t, -1.13520398f);
  p = std::fma(p, t, 0.27886807f);
  p = std::fma(p, t, -0.18628806f);
  p = std::fma(p, t, 0.09678418f);
  p = std::fma(p, t, 0.37409196f);
  p = std::fma(p, t, 1.00002368f);
  return std::fma(p, t, -1.26551223f);
}
// erfc(z) for z >= 0, with e^(−z²) (as e^(−hi), z² = hi + lo exactly) and lo for vec_normal_cdf_pdf
inline float tail(float z, float& e, float& lo) {
  float t;
  const float p = fit(z, t);
  const float hi = z * z;
  lo = std::fma(z, z, -hi);
  e = vec_exp(-hi);
  return t * e * vec_exp(p - lo);
}
}  // namespace erfc_detail

inline float vec_erfc(float x) {
  float e, lo;
  const float r = erfc_detail::tail(x < 0.0f ? -x : x, e, lo);
  return x < 0.0f ? 2.0f - r : r;
}
inline double vec_erfc(double x) { return std::erfc(x); }

// Φ(x) = erfc(−x/√2)/2 and φ(x) = e^(−x²/2)/√(2π) together, for GELU's backward: the erfc above already
// computes e^(−z²) = e^(−x²/2) (as e^(−hi)·e^(−lo), z² = hi + lo exactly), so φ costs one multiply instead of a
// third exponential (e^(−lo) = 1 − lo to float precision: |lo| <= half an ulp of hi). cdf is bit-identical to
// 0.5·vec_erfc(−x/√2) as GELU's forward computes it.
inline void vec_normal_cdf_pdf(float x, float& cdf, float& pdf) {
  const float xs = -x * 0.70710678118654752440f;  // erfc's argument, as in the forward
  float e, lo;
  const float r = erfc_detail::tail(xs < 0.0f ? -xs : xs, e, lo);
  cdf = 0.5f * (xs < 0.0f ? 2.0f - r : r);
  pdf = 0.39894228040143267794f * (e * (1.0f - lo));
}
inline void vec_normal_cdf_pdf(double x, double& cdf, double& pdf) {
  cdf = 0.5 * std::erfc(-x * 0.70710678118654752440);
  pdf = 0.39894228040143267794 * std::exp(-0.5 * x * x);
}

// eˣ − 1 for n values from SLEEF 3.5 (vec_math_sleef.cpp: Sleef_finz_expm1f*_u10, at most 1 ulp, the same bits
// at every vector width); double: libm. y may alias x. Ours where measured faster, SLEEF where it is
// (bench/vec_math_library.cpp, docs/engine.md "Element math"): for expm1, which has no short form like exp's, SLEEF
// is 3.8x (AVX-512) and 2.7x (AVX2) faster than the scalar libm loop ELU ran; for exp our polynomial is as fast as
// Sleef_finz_expf16_u10 and for GELU our erfc 2.9x faster than Sleef_finz_erfcf16_u15.
void vec_expm1(float* y, const float* x, size_t n);
void vec_expm1(double* y, const double* x, size_t n);
// Which SLEEF variant this build calls (for the benchmark's report)
const char* vec_math_library_variant();

namespace vec_detail {
constexpr int kLanes = 16;  // one AVX-512 register of floats, two AVX2 registers
}

// Σ term(i) for i < n in L partial sums of Acc (term(i) goes to lane i mod L), combined in lane order: vectorised,
// yet the same bits on every run and every vector width. The reductions below, the norms' row sums and row_ops'
// double dot product are all this loop.
template <class Acc, int L = vec_detail::kLanes, class Term>
Acc vec_lane_sum(int n, Term term) {
  Acc acc[L] = {};
  int i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; j++) acc[j] += term(i + j);
  for (int j = 0; i < n; i++, j++) acc[j] += term(i);
  Acc s = 0;
  for (int j = 0; j < L; j++) s += acc[j];
  return s;
}

template <class T>
T vec_sum(const T* x, int n) {
  return vec_lane_sum<T>(n, [&](int i) { return x[i]; });
}

template <class T>
T vec_dot(const T* x, const T* y, int n) {
  return vec_lane_sum<T>(n, [&](int i) { return x[i] * y[i]; });
}

// Σ double(x[i])·double(y[i]) in double lanes: the norms' row sums, accurate as one double accumulator but not
// serialised on its add latency (a one-accumulator double loop over a 128-wide row cost more than the row's
// arithmetic).
template <class T>
double vec_dot_wide(const T* x, const T* y, int n) {
  return vec_lane_sum<double>(n, [&](int i) { return double(x[i]) * double(y[i]); });
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
