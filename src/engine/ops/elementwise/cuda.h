#pragma once
// Elementwise helpers a GPU backend needs between the kernels: what the modules do inline on the CPU (residual
// adds, copies, the key shift) plus bf16 conversion for mixed-precision GEMM inputs and a non-finite count for
// the trainer's NaN guard. Device pointers; every function enqueues on `stream` and returns at once.
#include <cstddef>
#include <cstdint>

#include "engine/cuda/types.h"
#include "engine/ops/element_kernels.h"

namespace canonlab::cuda {

// dst[0..n) = 0
void fill_zero(CudaStream stream, float* dst, size_t n);
// dst[0..n) = src[0..n) (the buffers must not overlap)
void copy(CudaStream stream, float* dst, const float* src, size_t n);
// out = a + b (out may alias a or b)
void add(CudaStream stream, float* out, const float* a, const float* b, size_t n);
// dst += src
void add_into(CudaStream stream, float* dst, const float* src, size_t n);
// y = s · x (y may alias x)
void scale(CudaStream stream, float* y, const float* x, float s, size_t n);

// dst (rows, cols) with row stride ld_dst = src (rows, cols) with row stride ld_src: column blocks of fused
// buffers (v out of q|k|v, one head's columns, ...)
void copy_columns(CudaStream stream, float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols);
// dst += src on (rows, cols) blocks with row strides
void add_columns(CudaStream stream, float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols);

// Key shift: xs[b, t] = x[b, t] + x[b, t − offset] (x[b, t] alone for t < offset). x, xs: (B, Tn, C), offset >= 1.
void shift_add(CudaStream stream, float* xs, const float* x, int B, int Tn, int C, int offset);
// Its transpose, accumulated: dx[b, t] += dxs[b, t] + dxs[b, t + offset] (the second term only for t + offset < Tn).
void shift_add_backward(CudaStream stream, float* dx, const float* dxs, int B, int Tn, int C, int offset);

// bf16 copies of fp32 data (round to nearest even), for the bf16 GEMM inputs: contiguous, and (rows, cols) blocks
// with row strides.
void convert_to_bf16(CudaStream stream, Bf16* dst, const float* src, size_t n);
void convert_columns_to_bf16(CudaStream stream, Bf16* dst, int ld_dst, const float* src, int ld_src, int rows, int cols);
void convert_from_bf16(CudaStream stream, float* dst, const Bf16* src, size_t n);

// *count = number of NaN or ±inf entries of x[0..n) (an integer count, exact and order-independent).
// count is a device int.
void count_non_finite(CudaStream stream, int* count, const float* x, size_t n);
// ---- element kernels (element_kernels.h), bit for bit the CPU ops ----
// Learned positions: x (B, Tn, C) += pe (Tn, C); dpe (Tn, C) += Σ_b dx[b] in sequence order
void add_positions(CudaStream stream, float* x, const float* pe, int B, int Tn, int C);
void add_positions_backward(CudaStream stream, float* dpe, const float* dx, int B, int Tn, int C);
// dst = src rounded to bf16, kept as float (dst may alias src): the shadow weights of bf16 precision
void round_to_bf16(CudaStream stream, float* dst, const float* src, size_t n);
// int64s of scratch first_non_finite needs
inline size_t first_non_finite_scratch_size() { return size_t(kRowBlocks); }
// *index (a device int64) = the first index of a NaN or ±inf in x[0..n), or n when there is none
void first_non_finite(CudaStream stream, int64_t* index, const float* x, size_t n, int64_t* scratch);

}  // namespace canonlab::cuda
