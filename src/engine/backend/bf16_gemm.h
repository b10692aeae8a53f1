#pragma once
// Mixed precision on the CPU (train.precision: bf16): the linear layers' GEMMs take bf16 inputs and accumulate in
// fp32; everything else stays fp32. The GEMMs keep linear_forward / linear_backward's argument lists (float in,
// float out, bf16 inside), so the backend calls them in place of the fp32 ones:
//   forward  y  = bf16(x) · bf16(w)ᵀ (+ b)                 accumulated in fp32
//   backward dx = bf16(dy) · bf16(w),  dw += bf16(dy)ᵀ · bf16(x),  db += Σ dy (fp32)
// bf16(·) rounds to nearest, ties to even. The weights arrive already rounded: the parameter store keeps a bf16
// shadow of the fp32 master weights, refreshed once per forward pass (engine/params.h), so only the activations
// and gradients are converted at each GEMM. A product of two bf16 values is exact in fp32, so "round, then an fp32
// GEMM" is the reference (bf16_gemm_reference.cpp); oneDNN's matmul with bf16 inputs and f32 output (AVX512-BF16
// or AMX where the processor has them) replaces it.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace canonlab {

// The nearest bf16 value (ties to even), returned as the float it represents. NaN stays NaN (quiet), infinities
// stay infinite; values that round past the largest bf16 become infinite, as in every bf16 conversion.
inline float round_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return std::bit_cast<float>((bits | 0x00400000u) & 0xffff0000u);  // NaN: keep it a (quiet) NaN
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(rounded & 0xffff0000u);
}

// dst = round_to_bf16(src) elementwise (n); dst may alias src.
void round_to_bf16(float* dst, const float* src, size_t n);

// linear_forward's contract with bf16 inputs: y (N, OUT) rows of stride ldy = bf16(x) (N, IN) · w (OUT, IN)ᵀ + b;
// w must hold bf16 values (the shadow weights); b (OUT) or nullptr is added in fp32.
void linear_forward_bf16(float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N, int IN,
                         int OUT);
// linear_backward's contract with bf16 inputs: dx (skipped if null) written, dw and db (if non-null) accumulated in
// fp32; w must hold bf16 values.
void linear_backward_bf16(float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x, int ldx,
                          const float* w, int N, int IN, int OUT);

}  // namespace canonlab
