// The linear layer's three products as cuBLASLt GEMMs (cuda.h), in PyTorch's (OUT, IN) weight layout.
#include "engine/ops/linear/cuda.h"

namespace canonlab::cuda {

void linear_forward(Gemm& gemm, float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N,
                    int IN, int OUT) {
  if (N <= 0 || OUT <= 0) return;
  // y (N, OUT) = x (N, IN) @ wᵀ (IN, OUT) + b
  gemm.run(false, true, N, OUT, IN, 1.f, x, ldx, w, IN, 0.f, y, ldy, GemmInput::f32, b);
}

void linear_backward(Gemm& gemm, float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x,
                     int ldx, const float* w, int N, int IN, int OUT) {
  if (N <= 0) return;
  // dx (N, IN) = dy (N, OUT) @ w (OUT, IN)
  if (dx) gemm.run(false, false, N, IN, OUT, 1.f, dy, lddy, w, IN, 0.f, dx, lddx, GemmInput::f32);
  // dw (OUT, IN) += dyᵀ (OUT, N) @ x (N, IN)
  gemm.run(true, false, OUT, IN, N, 1.f, dy, lddy, x, ldx, 1.f, dw, IN, GemmInput::f32);
  if (db) bias_backward(gemm, db, dy, lddy, N, OUT);
}

void linear_forward_bf16(Gemm& gemm, float* y, int ldy, const Bf16* x, int ldx, const Bf16* w, const float* b, int N,
                         int IN, int OUT) {
  if (N <= 0 || OUT <= 0) return;
  gemm.run(false, true, N, OUT, IN, 1.f, x, ldx, w, IN, 0.f, y, ldy, GemmInput::bf16, b);
}

void linear_backward_bf16(Gemm& gemm, float* dx, int lddx, float* dw, const Bf16* dy, int lddy, const Bf16* x, int ldx,
                          const Bf16* w, int N, int IN, int OUT) {
  if (N <= 0) return;
  if (dx) gemm.run(false, false, N, IN, OUT, 1.f, dy, lddy, w, IN, 0.f, dx, lddx, GemmInput::bf16);
  gemm.run(true, false, OUT, IN, N, 1.f, dy, lddy, x, ldx, 1.f, dw, IN, GemmInput::bf16);
}

void bias_backward(Gemm& gemm, float* db, const float* dy, int lddy, int N, int OUT) {
  if (N <= 0 || OUT <= 0) return;
  // db (1, OUT) += 1 (1, N) @ dy (N, OUT)
  gemm.run(false, false, 1, OUT, N, 1.f, gemm.ones(size_t(N)), N, dy, lddy, 1.f, db, OUT, GemmInput::f32);
}

}  // namespace canonlab::cuda
