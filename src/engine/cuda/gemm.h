#pragma once
// GEMMs on the GPU through cuBLASLt, with the row-major contract of engine/blas.h:
//   C (M, N) = alpha · op(A) (M, K) @ op(B) (K, N) + beta · C  [+ bias (N) added to every row]
// lda/ldb/ldc are row strides, so q, k and v can be written straight into column blocks of one buffer.
// A and B are float or bf16 (GemmInput); C is always float and the products accumulate in fp32. fp32 inputs
// are multiplied in true fp32 (CUBLAS_COMPUTE_32F, never TF32), so train.precision=fp32 means what it says.
//
// Determinism: cuBLASLt gives the same bits for the same algorithm, workspace and inputs on the same GPU model
// and library version. A Gemm therefore (1) owns one fixed workspace, used by its own stream only, (2) picks
// each shape's algorithm once with cuBLASLt's heuristic and caches it for its lifetime (the heuristic itself
// is a deterministic function of the shape, the types, the alignments and the GPU), and (3) allows split-K
// only with reductions through the workspace in a separate, fixed-order step (CUBLASLT_REDUCTION_SCHEME_
// COMPUTE_TYPE / OUTPUT_TYPE): never INPLACE, which reduces into the output with counters. No floating-point
// atomics are involved anywhere.
#include <cstddef>
#include <memory>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

enum class GemmInput { f32, bf16 };

class Gemm {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;

  explicit Gemm(CudaStream stream, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Gemm();
  Gemm(Gemm&&) noexcept;
  Gemm& operator=(Gemm&&) noexcept;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  CudaStream stream() const;

  // Row-major C = alpha op(A) op(B) + beta C (+ bias), A and B of element type `input` (const float* or
  // const Bf16*). M, N, K >= 0; nothing happens when M or N is 0, and K = 0 is allowed only as a beta = 1
  // accumulation without bias (a no-op). The first call with a new shape runs the heuristic (host only, no
  // allocation), so a CUDA graph may capture it.
  void run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda, const void* B, int ldb,
           float beta, float* C, int ldc, GemmInput input, const float* bias = nullptr);

  // A device vector of at least n ones, for bias gradients as a GEMV (db += 1ᵀ dy). It grows on demand, which
  // allocates: call it with the largest n before capturing a graph (growing during a capture is an Error).
  const float* ones(size_t n);

  size_t algorithms_cached() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canonlab::cuda
