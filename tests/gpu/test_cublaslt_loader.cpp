// cuBLASLt opened at run time (engine/cuda/cublaslt_loader.h). No GPU needed: creating and destroying cuBLASLt's
// descriptors is host work, so these run (and must pass) on a machine with the toolkit and no GPU too. On the GPU
// machine the output's "cuBLASLt: PATH" line names the library the tests used (scripts/gpu-check.sh copies it into
// device.txt). The error path (no library anywhere: the places searched in the message) needs the library hidden
// from the process, which a test inside it cannot do once it is loaded; it was checked by hand (docs/gpu.md).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <iostream>

#include "engine/cuda/cublaslt_loader.h"

namespace canonlab::test {
namespace {

TEST(CublasLtLoader, FindsTheLibrary) {
  ASSERT_EQ(cuda::cublaslt_load_error(), "");
  EXPECT_NE(cuda::cublaslt_path().find("libcublasLt.so.13"), std::string::npos) << cuda::cublaslt_path();
  std::cout << "cuBLASLt: " << cuda::cublaslt_path() << "\n";
}

TEST(CublasLtLoader, ForwardsCallsToIt) {
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t op = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 3, 5, 3), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
}  // namespace canonlab::test
