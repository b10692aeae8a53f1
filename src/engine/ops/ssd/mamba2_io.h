#pragma once
// Mamba2's glue around the SSD scan (nn/mamba2.h, docs/linear-families.md): splitting the in_proj row
// [z | xBC | dt] into the scan's inputs, A = −exp(A_log), the D skip, and in backward reassembling the row's
// gradient while collecting ddt_bias and dD. One file: the loops are the reference. Rows are independent; the
// per-head parameter sums go through row_ops::row_block_sums (fixed blocks, summed in block order).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/row_ops.h"

namespace canonlab {

// xbc: (N, CD) rows of stride ld_xbc = [x | B | C] (the conv output, or the xBC columns of mixed);
// mixed: (N, Dp) = [z (Di) | xBC (CD) | dt logits (H)]; dt_bias: (H).
// Writes x: (N, Di), Bm, Cm: (N, GN), z: (N, Di), dt: (N, H) = softplus(dt logit + dt_bias).
template <class T>
void mamba2_split_forward(T* x, T* Bm, T* Cm, T* z, T* dt, const T* xbc, int ld_xbc, const T* mixed, const T* dt_bias,
                          int N, int Dp, int Di, int GN, int CD, int H) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* row = xbc + size_t(n) * ld_xbc;
    std::copy(row, row + Di, x + size_t(n) * Di);
    std::copy(row + Di, row + Di + GN, Bm + size_t(n) * GN);
    std::copy(row + Di + GN, row + Di + 2 * GN, Cm + size_t(n) * GN);
    const T* prow = mixed + size_t(n) * Dp;
    std::copy(prow, prow + Di, z + size_t(n) * Di);
    for (int h = 0; h < H; h++) dt[size_t(n) * H + h] = T(softplus(double(prow[Di + CD + h]) + double(dt_bias[h])));
  }
}

// A[h] = −exp(A_log[h]) (H)
template <class T>
void ssd_decay_rates(T* A, const T* A_log, int H) {
  for (int h = 0; h < H; h++) A[h] = T(-std::exp(double(A_log[h])));
}
// dA_log[h] += dA[h] · A[h]: the gradient through A = −exp(A_log)
template <class T>
void ssd_decay_rates_backward(T* dA_log, const T* dA, const T* A, int H) {
  for (int h = 0; h < H; h++) dA_log[h] += dA[h] * A[h];
}

// The D skip: y[n, h, :] += D[h] · x[n, h, :].  y, x: (N, H·P); D: (H)
template <class T>
void mamba2_skip_forward(T* y, const T* D, const T* x, int N, int H, int P) {
  const int Di = H * P;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++) {
      T* o = y + size_t(n) * Di + h * P;
      const T* xr = x + size_t(n) * Di + h * P;
      const T d = D[h];
      for (int p = 0; p < P; p++) o[p] += d * xr[p];
    }
}

// Backward of mamba2_split_forward and the D skip: from dx (the scan's), dy (the scan output's), dB, dC: (N, GN),
// dz: (N, Di) and ddt: (N, H) it writes
//   dxbc rows (stride ld_dxbc; the conv's output gradient, or the xBC columns of dmixed) = [dx + D·dy | dB | dC],
//   dmixed's z and dt columns: dz and ddt · sigmoid(dt logit + dt_bias)   (softplus' = sigmoid),
// and accumulates ddt_bias[h] += Σ_n of that dt gradient, dD[h] += Σ_n dy ⊙ x.
template <class T>
void mamba2_split_backward(T* dxbc, int ld_dxbc, T* dmixed, T* ddt_bias, T* dD, const T* dx, const T* dy, const T* dB,
                           const T* dC, const T* dz, const T* ddt, const T* mixed, const T* dt_bias, const T* D,
                           const T* x, int N, int Dp, int Di, int GN, int CD, int H, int P) {
  std::vector<double> sums(size_t(2) * H, 0.0);  // acc[h]: ddt_bias, acc[H + h]: dD
  row_ops::row_block_sums(sums.data(), 2 * H, N, [&](int n, double* acc) {
    T* row = dxbc + size_t(n) * ld_dxbc;
    const T* dxr = dx + size_t(n) * Di;
    const T* dyr = dy + size_t(n) * Di;
    for (int h = 0; h < H; h++) {
      const T d = D[h];
      for (int p = 0; p < P; p++) row[h * P + p] = dxr[h * P + p] + d * dyr[h * P + p];
      acc[H + h] += row_ops::dot_d(dyr + h * P, x + size_t(n) * Di + h * P, P);
    }
    std::copy(dB + size_t(n) * GN, dB + size_t(n + 1) * GN, row + Di);
    std::copy(dC + size_t(n) * GN, dC + size_t(n + 1) * GN, row + Di + GN);
    T* prow = dmixed + size_t(n) * Dp;
    std::copy(dz + size_t(n) * Di, dz + size_t(n + 1) * Di, prow);
    for (int h = 0; h < H; h++) {
      const double pre = double(mixed[size_t(n) * Dp + Di + CD + h]) + double(dt_bias[h]);
      const double d = double(ddt[size_t(n) * H + h]) / (1.0 + std::exp(-pre));  // softplus' = sigmoid
      prow[Di + CD + h] = T(d);
      acc[h] += d;
    }
  });
  for (int h = 0; h < H; h++) ddt_bias[h] += T(sums[h]), dD[h] += T(sums[H + h]);
}

}  // namespace canonlab
