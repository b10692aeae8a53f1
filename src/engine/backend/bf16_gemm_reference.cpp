// The reference bf16 GEMMs of engine/backend/bf16_gemm.h: round the activation operands to bf16, then run the
// fp32 GEMM (exact products of bf16 values, fp32 accumulation). A stand-in until the oneDNN matmul
// (engine/ops/linear/bf16*) takes its place; it allocates its rounded copies per call.
#include "engine/backend/bf16_gemm.h"

#include <cstddef>
#include <vector>

#include "engine/ops/linear/fast.h"

namespace canonlab {

namespace {
// rows (N, cols) of stride ld, rounded into a contiguous copy
std::vector<float> rounded_rows(const float* x, int ld, int N, int cols) {
  std::vector<float> out(size_t(N) * cols);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < cols; c++) out[size_t(n) * cols + c] = round_to_bf16(x[size_t(n) * ld + c]);
  return out;
}
// db (OUT) += Σ_n dy[n, :] in double, per column in row order (linear_backward's bias sum)
void bias_gradient(float* db, const float* dy, int lddy, int N, int OUT) {
#pragma omp parallel for schedule(static)
  for (int o = 0; o < OUT; o++) {
    double acc = 0;
    for (int n = 0; n < N; n++) acc += double(dy[size_t(n) * lddy + o]);
    db[o] += float(acc);
  }
}
}  // namespace

void round_to_bf16(float* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (size_t i = 0; i < n; i++) dst[i] = round_to_bf16(src[i]);
}

void linear_forward_bf16(float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N, int IN,
                         int OUT) {
  if (N <= 0 || OUT <= 0) return;
  const std::vector<float> xb = rounded_rows(x, ldx, N, IN);
  linear_forward(y, ldy, xb.data(), IN, w, b, N, IN, OUT);
}

void linear_backward_bf16(float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x, int ldx,
                          const float* w, int N, int IN, int OUT) {
  if (N <= 0) return;
  const std::vector<float> dyb = rounded_rows(dy, lddy, N, OUT), xb = rounded_rows(x, ldx, N, IN);
  // dx and dw from the rounded operands; db from the fp32 gradient (a reduction, kept in fp32)
  linear_backward(dx, lddx, dw, static_cast<float*>(nullptr), dyb.data(), OUT, xb.data(), IN, w, N, IN, OUT);
  if (db) bias_gradient(db, dy, lddy, N, OUT);
}

}  // namespace canonlab
