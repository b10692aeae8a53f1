#pragma once
// int8 linear layer, the fast path: y = (x · Wqᵀ) ⊙ scale + b with fp32 activations and fp32 accumulation, Wq the
// int8 weights (OUT, IN) and scale their per-output-row scales (quantize.h). Two kernels, chosen by the row count:
//   - few rows (the decode step's GEMV, N < kInt8GemmRows): register tiles of up to 4 input rows × 4 (8 for one
//     row) weight rows; each weight row is read as int8 and widened to fp32 in registers (AVX-512, or AVX2 + FMA
//     with 8 lanes), so the weights cross the memory bus at a quarter of the fp32 bytes. Every output is one
//     thread's dot product in a fixed order (16 or 8 lane sums over i, then a fixed pairwise tree over the lanes),
//     so the result does not depend on the threads.
//   - many rows (the batched forward of eval): compute-bound, so the int8 weights are widened once per call into a
//     per-thread fp32 scratch of integer values and the fp32 GEMM (oneDNN) runs on them, then each column is scaled.
//     Integers up to 127 are exact in fp32, so this is the definition with the GEMM's accumulation order.
// Without AVX-512 or AVX2 (or for T = double) a portable loop computes the same products in order.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define CANONLAB_INT8_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CANONLAB_INT8_AVX2 1
#endif

#include "engine/blas.h"

namespace canonlab {

// From this many rows on, the widen-then-GEMM kernel; below, the dot-product tiles (bench_kernels: int8_linear).
constexpr int kInt8GemmRows = 16;

namespace int8_detail {

#ifdef CANONLAB_INT8_AVX512
// GCC 12's intrinsics start several of their results from _mm512_undefined_*() (a self-initialised variable), which
// -Wuninitialized reports once they are inlined here; the values are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
constexpr __mmask16 kAll = 0xffff;
// The 16 lanes summed as a fixed tree: 8 + 8, 4 + 4, 2 + 2, 1 + 1.
inline float lane_sum(__m512 v) {
  // lanes 8..15 onto 0..7 by a swap of the 256-bit halves
  const __m256 s8 = _mm512_castps512_ps256(_mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2))));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
  return _mm_cvtss_f32(s4);
}

// y[r, c] for the NR input rows x[r] (stride ldx) and the OR weight rows q[c] (stride IN): y: NR rows of stride ldy.
template <int NR, int OR>
inline void dot_tile_avx512(float* y, int ldy, const float* x, int ldx, const int8_t* q, const float* scale,
                            const float* b, int IN) {
  __m512 acc[NR][OR];
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < OR; c++) acc[r][c] = _mm512_setzero_ps();
  auto step = [&](int i, __mmask16 m) {
    __m512 w[OR];
    for (int c = 0; c < OR; c++) {
      const __m128i bytes = _mm_maskz_loadu_epi8(m, q + size_t(c) * IN + i);  // 16 int8 weights
      w[c] = _mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, bytes));
    }
    for (int r = 0; r < NR; r++) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + size_t(r) * ldx + i);
      for (int c = 0; c < OR; c++) acc[r][c] = _mm512_fmadd_ps(xv, w[c], acc[r][c]);
    }
  };
  int i = 0;
  for (; i + 16 <= IN; i += 16) step(i, kAll);
  if (i < IN) step(i, __mmask16((1u << (IN - i)) - 1u));
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < OR; c++)
      y[size_t(r) * ldy + c] = lane_sum(acc[r][c]) * scale[c] + (b ? b[c] : 0.0f);
}

#pragma GCC diagnostic pop
template <int NR, int OR>
inline void dot_tile_simd(float* y, int ldy, const float* x, int ldx, const int8_t* q, const float* scale,
                          const float* b, int IN) {
  dot_tile_avx512<NR, OR>(y, ldy, x, ldx, q, scale, b, IN);
}
#elif defined(CANONLAB_INT8_AVX2)
// The same tiles with 8 lanes. AVX2 has no masked byte load, so the last IN % 8 columns go through zero-padded
// copies (the padding multiplies zero weights by zero inputs: it adds exact zeros).
inline float lane_sum(__m256 v) {  // 4 + 4, 2 + 2, 1 + 1
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
  return _mm_cvtss_f32(s4);
}

template <int NR, int OR>
inline void dot_tile_simd(float* y, int ldy, const float* x, int ldx, const int8_t* q, const float* scale,
                          const float* b, int IN) {
  __m256 acc[NR][OR];
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < OR; c++) acc[r][c] = _mm256_setzero_ps();
  auto step = [&](const int8_t* const* qi, const float* const* xi) {
    __m256 w[OR];
    for (int c = 0; c < OR; c++) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qi[c]));  // 8 int8 weights
      w[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
    }
    for (int r = 0; r < NR; r++) {
      const __m256 xv = _mm256_loadu_ps(xi[r]);
      for (int c = 0; c < OR; c++) acc[r][c] = _mm256_fmadd_ps(xv, w[c], acc[r][c]);
    }
  };
  const int8_t* qi[OR];
  const float* xi[NR];
  int i = 0;
  for (; i + 8 <= IN; i += 8) {
    for (int c = 0; c < OR; c++) qi[c] = q + size_t(c) * IN + i;
    for (int r = 0; r < NR; r++) xi[r] = x + size_t(r) * ldx + i;
    step(qi, xi);
  }
  if (i < IN) {
    int8_t qpad[OR][8] = {};
    float xpad[NR][8] = {};
    for (int c = 0; c < OR; c++) {
      std::copy(q + size_t(c) * IN + i, q + size_t(c) * IN + IN, qpad[c]);
      qi[c] = qpad[c];
    }
    for (int r = 0; r < NR; r++) {
      std::copy(x + size_t(r) * ldx + i, x + size_t(r) * ldx + IN, xpad[r]);
      xi[r] = xpad[r];
    }
    step(qi, xi);
  }
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < OR; c++)
      y[size_t(r) * ldy + c] = lane_sum(acc[r][c]) * scale[c] + (b ? b[c] : 0.0f);
}
#endif

#if defined(CANONLAB_INT8_AVX512) || defined(CANONLAB_INT8_AVX2)
using DotTile = void (*)(float*, int, const float*, int, const int8_t*, const float*, const float*, int);
constexpr int kMaxTileRows = 4, kMaxTileCols = 8;
template <int NR>
inline DotTile dot_tile_for_cols(int oc) {
  switch (oc) {
    case 1: return &dot_tile_simd<NR, 1>;
    case 2: return &dot_tile_simd<NR, 2>;
    case 3: return &dot_tile_simd<NR, 3>;
    case 4: return &dot_tile_simd<NR, 4>;
    case 5: return &dot_tile_simd<NR, 5>;
    case 6: return &dot_tile_simd<NR, 6>;
    case 7: return &dot_tile_simd<NR, 7>;
    default: return &dot_tile_simd<NR, 8>;
  }
}
// The tile kernel for nr (1..4) input rows and oc (1..8) weight rows; 8 weight rows are used for one input row only.
inline DotTile dot_tile(int nr, int oc) {
  switch (nr) {
    case 1: return dot_tile_for_cols<1>(oc);
    case 2: return dot_tile_for_cols<2>(std::min(oc, 4));
    case 3: return dot_tile_for_cols<3>(std::min(oc, 4));
    default: return dot_tile_for_cols<4>(std::min(oc, 4));
  }
}
#endif

// Portable: each output is the dot product over i in order, in T.
template <class T>
void dot_rows_portable(T* y, int ldy, const T* x, int ldx, const int8_t* q, const float* scale, const T* b, int N,
                       int IN, int OUT) {
  const bool parallel = size_t(N) * OUT * IN >= (size_t(1) << 16);
#pragma omp parallel for schedule(static) if (parallel)
  for (int o = 0; o < OUT; o++) {
    const int8_t* qo = q + size_t(o) * IN;
    for (int n = 0; n < N; n++) {
      const T* xn = x + size_t(n) * ldx;
      T acc = T(0);
      for (int i = 0; i < IN; i++) acc += xn[i] * T(qo[i]);
      y[size_t(n) * ldy + o] = acc * T(scale[o]) + (b ? b[o] : T(0));
    }
  }
}

// The dot-product tiles: weight-row blocks of OB over the threads; within a block, input rows 4 at a time.
inline void dot_rows(float* y, int ldy, const float* x, int ldx, const int8_t* q, const float* scale, const float* b,
                     int N, int IN, int OUT) {
#if defined(CANONLAB_INT8_AVX512) || defined(CANONLAB_INT8_AVX2)
  const int OB = N == 1 ? kMaxTileCols : 4;
  const int blocks = (OUT + OB - 1) / OB;
  const bool parallel = size_t(N) * OUT * IN >= (size_t(1) << 16);  // tiny GEMVs are not worth waking threads
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < blocks; blk++) {
    const int o0 = blk * OB, oc = std::min(OB, OUT - o0);
    for (int n0 = 0; n0 < N; n0 += kMaxTileRows) {
      const int nr = std::min(kMaxTileRows, N - n0);
      dot_tile(nr, oc)(y + size_t(n0) * ldy + o0, ldy, x + size_t(n0) * ldx, ldx, q + size_t(o0) * IN,
                            scale + o0, b ? b + o0 : nullptr, IN);
    }
  }
#else
  dot_rows_portable(y, ldy, x, ldx, q, scale, b, N, IN, OUT);
#endif
}

// Widen Wq to fp32 integers in a scratch of this call's own, one fp32 GEMM, then y = y * scale + b column by column.
// (The scratch is not kept between calls: no state outlives the call. Allocating it costs little beside a GEMM of
// at least kInt8GemmRows rows.)
template <class T>
void widen_then_gemm(T* y, int ldy, const T* x, int ldx, const int8_t* q, const float* scale, const T* b, int N,
                     int IN, int OUT) {
  const size_t n = size_t(OUT) * IN;
  const auto widened = std::make_unique_for_overwrite<T[]>(n);  // (OUT, IN), every element written below
  T* wf = widened.get();
#pragma omp parallel for schedule(static)
  for (int o = 0; o < OUT; o++)
    for (int i = 0; i < IN; i++) wf[size_t(o) * IN + i] = T(q[size_t(o) * IN + i]);
  // y (N, OUT) = x (N, IN) @ Wq^T (IN, OUT)
  gemm(false, true, N, OUT, IN, T(1), x, ldx, wf, IN, T(0), y, ldy);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    T* yr = y + size_t(r) * ldy;
    for (int o = 0; o < OUT; o++) yr[o] = yr[o] * T(scale[o]) + (b ? b[o] : T(0));
  }
}

}  // namespace int8_detail

// y: (N, OUT) rows of stride ldy; x: (N, IN) rows of stride ldx; q: (OUT, IN) int8; scale: (OUT); b: (OUT) or nullptr
template <class T>
void int8_linear_forward(T* y, int ldy, const T* x, int ldx, const int8_t* q, const float* scale, const T* b, int N,
                         int IN, int OUT) {
  if (N <= 0 || OUT <= 0) return;
  if (N >= kInt8GemmRows) return int8_detail::widen_then_gemm(y, ldy, x, ldx, q, scale, b, N, IN, OUT);
  if constexpr (std::is_same_v<T, float>)
    int8_detail::dot_rows(y, ldy, x, ldx, q, scale, b, N, IN, OUT);
  else
    int8_detail::dot_rows_portable(y, ldy, x, ldx, q, scale, b, N, IN, OUT);
}

}  // namespace canonlab
