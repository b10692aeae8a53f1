#pragma once
// Small helpers for row-parallel loops over (tokens, channels) buffers whose results must not depend on the
// thread count or the schedule (the mixer modules' parameter-gradient sums, gated_rmsnorm).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/ops/vec_math.h"

namespace canonlab {

namespace row_ops {

// Σ a[i]·b[i] in double, 8 partial sums combined in a fixed order (vectorises; the same bits every run).
template <class T>
double dot_d(const T* a, const T* b, int n) {
  return vec_lane_sum<double, 8>(n, [&](int i) { return double(a[i]) * double(b[i]); });
}

// Row-parallel column sums that do not depend on the thread count or the schedule: rows are cut into kBlocks
// fixed blocks, each block is summed serially (row order) by one thread into its own partial, and the partials
// are added to out in block order. f(n, acc) handles row n (it may also write row n's outputs) and adds its
// contributions to acc: (M) doubles.
constexpr int kBlocks = 64;
template <class F>
void row_block_sums(double* out, int M, int N, F&& f) {
  std::vector<double> part(size_t(kBlocks) * M, 0.0);
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < kBlocks; blk++) {
    const int n0 = int(int64_t(N) * blk / kBlocks), n1 = int(int64_t(N) * (blk + 1) / kBlocks);
    double* acc = part.data() + size_t(blk) * M;
    for (int n = n0; n < n1; n++) f(n, acc);
  }
  for (int blk = 0; blk < kBlocks; blk++)
    for (int m = 0; m < M; m++) out[m] += part[size_t(blk) * M + m];
}

// dst[0..n) = 0 (threaded).
template <class T>
void fill_zero(T* dst, size_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (size_t i = 0; i < n; i++) dst[i] = T(0);
}

// dst += src, elementwise over n (threaded; each element independent).
template <class T>
void add_into(T* dst, const T* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}


}  // namespace row_ops

}  // namespace canonlab
