#pragma once
// Elementwise helpers of a GPU step as element kernels (engine/ops/element_kernels.h): the learned positions' add and
// its gradient, the one-pass bf16 rounding of the shadow weights, and the first non-finite index the non-finite guard
// reports. The same code runs on the GPU (elementwise/cuda.cu) and on the host (the CUDA layer's host stand-in), and
// each matches its CPU op of elementwise.h, linear/bf16.h or adamw/adamw.h bit for bit.
#include <cstddef>
#include <cstdint>

#include "engine/ops/element_kernels.h"

namespace canonlab {

// x: (B, Tn, C) += pe[t]: (Tn, C), one element of x each
struct AddPositions {
  float* x;
  const float* pe;
  size_t row;  // Tn · C
  CANONLAB_HD void operator()(size_t i) const { x[i] += pe[i % row]; }
};

// dpe[t, c] += Σ_b dx[b, t, c], the sequences added in order (b = 0, 1, ...) in float, as the CPU loop does
struct AddPositionsBackward {
  float* dpe;
  const float* dx;
  size_t row;  // Tn · C
  int B;
  CANONLAB_HD void operator()(size_t i) const {
    float s = dpe[i];
    for (int b = 0; b < B; b++) s += dx[(size_t)b * row + i];
    dpe[i] = s;
  }
};

// dst = src rounded to bf16 (nearest, ties to even; NaN stays NaN), kept as float: linear/bf16.h's float_to_bf16
struct RoundToBf16 {
  float* dst;
  const float* src;
  CANONLAB_HD void operator()(size_t i) const {
    union {
      float f;
      uint32_t u;
    } v;
    v.f = src[i];
    const uint32_t bits = v.u;
    const uint32_t rounded = ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16;
    const uint32_t quiet_nan = ((bits >> 16) | 0x0040u) << 16;
    v.u = (bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
    dst[i] = v.f;
  }
};

CANONLAB_HD inline bool hd_is_finite(float x) { return x - x == 0.f; }  // false for NaN and ±inf

// The first non-finite index of x (n when every value is finite), in two kernels over kRowBlocks fixed blocks: each
// block's first (its own end when none), then the smallest of those. Integers only: exact.
struct FirstNonFiniteInBlocks {
  const float* x;
  int64_t* partial;  // (kRowBlocks)
  size_t n;
  CANONLAB_HD void operator()(size_t blk) const {
    const size_t lo = n * blk / kRowBlocks, hi = n * (blk + 1) / kRowBlocks;
    size_t i = lo;
    while (i < hi && hd_is_finite(x[i])) i++;
    partial[blk] = i < hi ? (int64_t)i : (int64_t)n;
  }
};
struct FirstNonFiniteTotal {
  const int64_t* partial;
  int64_t* index;  // (1)
  CANONLAB_HD void operator()(size_t) const {
    int64_t first = partial[0];
    for (int b = 1; b < kRowBlocks; b++) first = partial[b] < first ? partial[b] : first;
    *index = first;
  }
};

// The step guard (Backend::step_guard): the first step whose loss or gradient norm is not finite, kept once set
struct StepGuard {
  int32_t* halted_at;
  const int32_t* step;
  const double* values;
  int n;
  CANONLAB_HD void operator()(size_t) const {
    if (*halted_at >= 0) return;
    for (int i = 0; i < n; i++)
      if (!(values[i] - values[i] == 0.0)) {
        *halted_at = *step;
        return;
      }
  }
};

template <class Launch>
void add_positions_elements(const Launch& launch, float* x, const float* pe, int B, int Tn, int C) {
  const size_t row = (size_t)Tn * C;
  launch((size_t)B * row, AddPositions{x, pe, row});
}
template <class Launch>
void add_positions_backward_elements(const Launch& launch, float* dpe, const float* dx, int B, int Tn, int C) {
  const size_t row = (size_t)Tn * C;
  launch(row, AddPositionsBackward{dpe, dx, row, B});
}
template <class Launch>
void round_to_bf16_elements(const Launch& launch, float* dst, const float* src, size_t n) {
  launch(n, RoundToBf16{dst, src});
}
// partial: kRowBlocks int64 of scratch; *index (device) written
template <class Launch>
void first_non_finite_elements(const Launch& launch, int64_t* index, const float* x, size_t n, int64_t* partial) {
  launch((size_t)kRowBlocks, FirstNonFiniteInBlocks{x, partial, n});
  launch(1, FirstNonFiniteTotal{partial, index});
}
template <class Launch>
void step_guard_elements(const Launch& launch, int32_t* halted_at, const int32_t* step, const double* values, int n) {
  launch(1, StepGuard{halted_at, step, values, n});
}

}  // namespace canonlab
