#pragma once
// Row-major GEMM over float and double, so the same module code runs in fp32 for training and in fp64 for
// finite-difference gradient checks. float goes through oneDNN (faster on our shapes, docs/blas-choice.md),
// double through OpenBLAS (oneDNN has no double GEMM).
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C
// lda/ldb/ldc are row strides, which lets callers write q, k, v straight into columns of one buffer.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

namespace canonlab {

inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

// The plain triple loop with the same contract: the reference the BLAS path is tested against.
template <class T>
void gemm_naive(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                T beta, T* C, int ldc) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++) {
        double a = trans_a ? A[k * lda + m] : A[m * lda + k];
        double b = trans_b ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
      }
      C[m * ldc + n] = T(alpha * acc + (beta == T(0) ? 0.0 : beta * double(C[m * ldc + n])));
    }
}

}  // namespace canonlab
