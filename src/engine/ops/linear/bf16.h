#pragma once
// bf16 mixed precision for GEMMs (train.precision: bf16): both inputs are rounded to bfloat16 (round to nearest
// even, as PyTorch's autocast and the hardware conversions do), products and sums are fp32, outputs and gradients
// stay fp32. A product of two bf16 values is exact in fp32 (8 + 8 significant bits < 24), so the only difference
// from an fp32 GEMM is the input rounding and the accumulation order.
//
// Two ways to run it, chosen once per process by what the CPU and oneDNN support:
//   native:   oneDNN's matmul primitive on bf16 inputs with a dense f32 output, where oneDNN runs it in hardware
//             (AVX512-BF16: brg:avx512_core_bf16; AMX: brg:avx512_core_amx);
//   emulated: the inputs are rounded to bf16 values held in fp32, then the ordinary fp32 GEMM runs on them. Used
//             everywhere else (oneDNN 2.6 has no bf16 matmul on AVX2-only processors, and emulates the dot products
//             on AVX-512 without BF16, slower than this): the same numbers up to the accumulation order, no faster
//             than fp32.
// Either way one process always takes the same path, so runs are deterministic.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace canonlab {

using bf16_bits = uint16_t;  // a bfloat16 value: the upper 16 bits of an IEEE float

// Round to nearest, ties to even; NaN stays a (quiet) NaN, infinities stay infinite, overflow rounds to infinity.
// Branch-free, so the conversion loops vectorise (they were 6% of a bf16 step as a scalar loop).
inline bf16_bits float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x0040u;  // a NaN stays a NaN, even one whose payload would round away
  return bf16_bits((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline float bf16_to_float(bf16_bits b) { return std::bit_cast<float>(uint32_t(b) << 16); }
inline float round_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// in: (rows, cols) with row stride ld_in -> out: the same values rounded to bf16 (kept as floats), rows of stride
// ld_out. Rows are split over the OpenMP threads; each value is rounded on its own, so the result does not depend
// on the thread count.
void round_rows_to_bf16(float* out, int ld_out, const float* in, int ld_in, int rows, int cols);
// The same into bf16 storage.
void rows_to_bf16(bf16_bits* out, int ld_out, const float* in, int ld_in, int rows, int cols);

enum class Bf16Path { native, emulated };

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major with row strides, A and B rounded to bf16 first. Holds
// the oneDNN primitives it created (one per shape) and the scratch its inputs are converted into, so after the
// first step of a run it neither allocates nor creates anything. Not thread-safe: one per backend / per thread.
class Bf16Gemm {
 public:
  Bf16Gemm();
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  // reuse_a: A is the previous call's A (the same values, stored the same way), already converted; the linear
  // layer's backward uses it for dy, the first operand of both dx = dy w and dw = dyᵀ x.
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
            int ldb, float beta, float* C, int ldc, bool reuse_a = false);
  Bf16Path path() const { return path_; }

 private:
  struct Native;  // the oneDNN engine, stream and primitive cache
  Bf16Path path_;
  std::unique_ptr<Native> native_;
  std::vector<float> a_rounded_, b_rounded_;       // emulated path
  std::vector<bf16_bits> a_bits_, b_bits_;         // native path
};

// What Bf16Gemm chooses on this CPU: native where this process's oneDNN runs bf16 matmuls in hardware (AVX512-BF16
// or AMX), emulated elsewhere. bf16_matmul_impl() is oneDNN's implementation name ("" where it has none);
// bf16_path_description() one line for the user: the path, and on the emulated one why and what it costs.
Bf16Path bf16_gemm_path();
const std::string& bf16_matmul_impl();
std::string bf16_path_description();
const char* bf16_path_name(Bf16Path path);

// The linear layer of engine/ops/linear/fast.h with bf16 GEMM inputs (same arguments and layout; the bias and its
// gradient stay fp32 and are handled exactly as there).
void linear_forward_bf16(Bf16Gemm& g, float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N,
                         int IN, int OUT);
void linear_backward_bf16(Bf16Gemm& g, float* dx, int lddx, float* dw, float* db, const float* dy, int lddy,
                          const float* x, int ldx, const float* w, int N, int IN, int OUT);

// The reference: round both inputs to bf16 and run the plain triple loop with double accumulation.
void gemm_bf16_naive(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace canonlab
