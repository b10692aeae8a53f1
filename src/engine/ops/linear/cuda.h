#pragma once
// The linear layer on the GPU: the CPU ops of fast.h on cuBLASLt (engine/cuda/gemm.h). Where the CPU ops take no
// handle, these take the Gemm that owns the stream, the cuBLASLt handle, its workspace and the algorithm cache
// (a GEMM needs all four, and keeping them in one object is what makes the algorithm choice fixed).
//
// fp32: inputs and products in fp32. bf16: x, w (and dy) are bf16 copies (convert_to_bf16, or the bf16 shadow of
// the weights that adamw_update writes), products accumulate in fp32 and outputs are fp32; the bias is added in
// fp32 by cuBLASLt's epilogue and its gradient is summed from the fp32 dy (bias_backward). GELU stays a separate
// kernel: cuBLASLt's GELU epilogue is the tanh approximation, not the exact erf GELU the CPU computes.
#include "engine/cuda/gemm.h"
#include "engine/cuda/types.h"

namespace canonlab::cuda {

// y: (N, OUT) rows of stride ldy; x: (N, IN) rows of stride ldx; w: (OUT, IN); b: (OUT) or nullptr
void linear_forward(Gemm& gemm, float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N,
                    int IN, int OUT);
// dx: (N, IN) stride lddx, written (skipped if nullptr); dw: (OUT, IN) and db: (OUT) accumulated (db skipped if
// nullptr); dy: (N, OUT) stride lddy. db needs gemm.ones(N) (reserve it before graph capture).
void linear_backward(Gemm& gemm, float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x,
                     int ldx, const float* w, int N, int IN, int OUT);

// The same with bf16 GEMM inputs. Strides are in elements of the bf16 buffers.
void linear_forward_bf16(Gemm& gemm, float* y, int ldy, const Bf16* x, int ldx, const Bf16* w, const float* b, int N,
                         int IN, int OUT);
// dx written (skipped if nullptr), dw accumulated, both in fp32; no bias here: see bias_backward
void linear_backward_bf16(Gemm& gemm, float* dx, int lddx, float* dw, const Bf16* dy, int lddy, const Bf16* x, int ldx,
                          const Bf16* w, int N, int IN, int OUT);

// db (OUT) += Σ_n dy[n, :], dy: (N, OUT) stride lddy, as the GEMV 1ᵀ dy in fp32
void bias_backward(Gemm& gemm, float* db, const float* dy, int lddy, int N, int OUT);

}  // namespace canonlab::cuda
