// cuBLASLt behind the row-major GEMM contract (gemm.h): one handle, one workspace and an algorithm cache per Gemm.
//
// cuBLASLt is column-major. A row-major matrix X with row stride ld is, read column-major, Xᵀ with leading
// dimension ld, so the row-major product C = op(A) op(B) is computed as the column-major Cᵀ = op(B)ᵀ op(A)ᵀ:
// the operands swap places, M and N swap, and each keeps its own transpose flag.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/buffer.h"
#include "engine/cuda/check.h"
#include "engine/cuda/cublaslt_loader.h"
#include "engine/cuda/gemm.h"

namespace canonlab::cuda {

namespace {

// Largest power of two up to 16 bytes dividing the address: what the heuristic is told about each operand, so it
// never picks an algorithm whose vector loads the pointer cannot serve.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int align = 16;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct Key {
  bool trans_a, trans_b;
  int M, N, K, lda, ldb, ldc;
  GemmInput input;
  bool bias;
  int align_a, align_b, align_c, align_bias;
  auto tie() const {
    return std::tie(trans_a, trans_b, M, N, K, lda, ldb, ldc, input, bias, align_a, align_b, align_c, align_bias);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// The descriptors and the chosen algorithm of one shape, kept for the Gemm's lifetime.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct Gemm::Impl {
  CudaStream stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer<std::uint8_t> workspace;
  DeviceBuffer<float> ones;
  std::map<Key, Plan> plans;

  ~Impl() {
    for (auto& [key, plan] : plans) {
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.c);
      cublasLtMatmulDescDestroy(plan.desc);
    }
    if (handle) cublasLtDestroy(handle);
  }

  Plan& plan_for(const Key& k) {
    auto it = plans.find(k);
    if (it != plans.end()) return it->second;
    Plan p;
    const cudaDataType_t ab = k.input == GemmInput::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    CANONLAB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // column-major Cᵀ (N, M) = op(B)ᵀ (N, K) · op(A)ᵀ (K, M): B's memory is the first operand, A's the second
    const cublasOperation_t op_first = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CANONLAB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    CANONLAB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    if (k.bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      CANONLAB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      const cudaDataType_t bias_type = CUDA_R_32F;
      CANONLAB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                           sizeof(bias_type)));
    }
    // Stored (column-major) shapes: B is (K, N) read as (N, K), or (N, K) read as (K, N) when transposed; likewise A.
    CANONLAB_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.a, ab, k.trans_b ? k.K : k.N, k.trans_b ? k.N : k.K, k.ldb));
    CANONLAB_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.b, ab, k.trans_a ? k.M : k.K, k.trans_a ? k.K : k.M, k.lda));
    CANONLAB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, k.N, k.M, k.ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    CANONLAB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = workspace.size();
    // split-K only through the workspace and a separate fixed-order reduction (see gemm.h)
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    const uint32_t align_first = uint32_t(k.align_b), align_second = uint32_t(k.align_a),
                   align_c = uint32_t(k.align_c);
    auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, size_t n) {
      CANONLAB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, v, n));
    };
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof(reductions));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first, sizeof(align_first));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second, sizeof(align_second));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c));
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.workspaceSize > ws) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.desc);
      throw Error("cuBLASLt has no algorithm for the GEMM M=" + std::to_string(k.M) + " N=" + std::to_string(k.N) +
                  " K=" + std::to_string(k.K) + " lda=" + std::to_string(k.lda) + " ldb=" + std::to_string(k.ldb) +
                  " ldc=" + std::to_string(k.ldc) + (k.input == GemmInput::bf16 ? " (bf16 inputs)" : " (fp32)") +
                  " (status " + std::to_string(int(st)) + ")");
    }
    p.algo = result.algo;
    return plans.emplace(k, p).first->second;
  }
};

Gemm::Gemm(CudaStream stream, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  // cuBLASLt is opened at run time (cublaslt_loader.h): without it, the places searched, before any GPU work
  if (const std::string why = cublaslt_load_error(); !why.empty()) throw Error(why);
  CANONLAB_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  impl_->workspace = DeviceBuffer<std::uint8_t>(workspace_bytes);
}
Gemm::~Gemm() = default;
Gemm::Gemm(Gemm&&) noexcept = default;
Gemm& Gemm::operator=(Gemm&&) noexcept = default;

CudaStream Gemm::stream() const { return impl_->stream; }
size_t Gemm::algorithms_cached() const { return impl_->plans.size(); }

void Gemm::run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda, const void* B,
               int ldb, float beta, float* C, int ldc, GemmInput input, const float* bias) {
  CANONLAB_CHECK(M >= 0 && N >= 0 && K >= 0, "Gemm::run: negative size M=" + std::to_string(M) +
                                                 " N=" + std::to_string(N) + " K=" + std::to_string(K));
  if (M == 0 || N == 0) return;
  if (K == 0) {
    CANONLAB_CHECK(beta == 1.f && bias == nullptr, "Gemm::run: K = 0 is only allowed as a beta = 1 accumulation");
    return;
  }
  const Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, input, bias != nullptr,
                alignment_of(A), alignment_of(B), alignment_of(C), bias ? alignment_of(bias) : 16};
  Plan& p = impl_->plan_for(key);
  if (bias)
    CANONLAB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  CANONLAB_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, p.desc, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                       impl_->workspace.data(), impl_->workspace.size(), impl_->stream));
}

const float* Gemm::ones(size_t n) {
  if (impl_->ones.size() < n) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CANONLAB_CUDA_CHECK(cudaStreamIsCapturing(impl_->stream, &status));
    CANONLAB_CHECK(status == cudaStreamCaptureStatusNone,
                   "Gemm::ones(" + std::to_string(n) + ") would allocate during CUDA graph capture; "
                   "call it with the largest row count before capturing");
    const std::vector<float> host(std::max(n, 2 * impl_->ones.size()), 1.f);
    impl_->ones = DeviceBuffer<float>(std::span<const float>(host));
  }
  return impl_->ones.data();
}

}  // namespace canonlab::cuda
