#include "engine/ops/linear/bf16.h"

#include <algorithm>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/blas.h"
#include "engine/ops/elementwise/elementwise.h"
#include "engine/ops/linear/fast.h"
#include "engine/error.h"

namespace canonlab {
namespace {

// The stored layout of an operand: op(X) is (rows x cols) logically; stored transposed when trans is set.
struct Stored {
  int rows, cols;
};
Stored stored_shape(bool trans, int logical_rows, int logical_cols) {
  return trans ? Stored{logical_cols, logical_rows} : Stored{logical_rows, logical_cols};
}

template <class Out>
void grow(std::vector<Out>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
}

dnnl::memory::desc strided_desc(dnnl::memory::data_type type, int rows, int cols, bool trans, int ld) {
  // Logical (rows, cols); stored row-major (rows, cols) with stride ld, or transposed (cols, rows) with stride ld.
  const dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

}  // namespace

void round_rows_to_bf16(float* out, int ld_out, const float* in, int ld_in, int rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* src = in + size_t(r) * ld_in;
    float* dst = out + size_t(r) * ld_out;
    for (int c = 0; c < cols; c++) dst[c] = round_to_bf16(src[c]);
  }
}

void rows_to_bf16(bf16_bits* out, int ld_out, const float* in, int ld_in, int rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* src = in + size_t(r) * ld_in;
    bf16_bits* dst = out + size_t(r) * ld_out;
    for (int c = 0; c < cols; c++) dst[c] = float_to_bf16(src[c]);
  }
}

// ---- the native path: oneDNN's matmul on bf16 inputs -------------------------------------------------------------

struct Bf16Gemm::Native {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // One primitive per (trans_a, trans_b, M, N, K, alpha, beta): creating one costs far more than running a small
  // GEMM, and a run uses a handful of shapes. The output is always dense (ld = N): oneDNN 2.6 runs its bf16 brgemm
  // kernels only on a dense destination and falls back to gemm:jit (slower than the fp32 sgemm) on a strided one.
  std::map<std::tuple<bool, bool, int, int, int, float, float>, dnnl::matmul> primitives;
  std::vector<float> c_dense;  // a strided C is computed here and copied out

  dnnl::matmul& primitive(bool ta, bool tb, int M, int N, int K, float alpha, float beta) {
    const auto key = std::make_tuple(ta, tb, M, N, K, alpha, beta);
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    using dt = dnnl::memory::data_type;
    // The converted operands are contiguous in their stored layout: ld = stored columns.
    const Stored a = stored_shape(ta, M, K), b = stored_shape(tb, K, N);
    const auto src = strided_desc(dt::bf16, M, K, ta, a.cols);
    const auto weights = strided_desc(dt::bf16, K, N, tb, b.cols);
    const auto dst = strided_desc(dt::f32, M, N, false, N);
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine);
    return primitives.emplace(key, dnnl::matmul(pd)).first->second;
  }
};

namespace {
// The implementation oneDNN picks for a dense bf16 matmul on this CPU ("brg:avx512_core_bf16", "brg:avx512_core_amx",
// "gemm:jit", ...), or "" where it has none (oneDNN 2.6 on AVX2-only processors).
std::string probe_bf16_matmul() {
  try {
    using dt = dnnl::memory::data_type;
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc a({256, 256}, dt::bf16, dnnl::memory::format_tag::ab);
    const dnnl::memory::desc c({256, 256}, dt::f32, dnnl::memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine);
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}
}  // namespace

const std::string& bf16_matmul_impl() {
  static const std::string impl = probe_bf16_matmul();  // the CPU and the library do not change while we run
  return impl;
}

Bf16Path bf16_gemm_path() {
  // Native only where oneDNN runs bf16 dot products in hardware (AVX512-BF16 or AMX): on AVX-512 without them it
  // emulates them, slower than the fp32 GEMM on bf16-rounded inputs that gives the same products.
  const std::string& impl = bf16_matmul_impl();
  const bool hardware = impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos;
  return hardware ? Bf16Path::native : Bf16Path::emulated;
}

std::string bf16_path_description() {
  if (bf16_gemm_path() == Bf16Path::native) return "native: oneDNN bf16 matmul (" + bf16_matmul_impl() + ")";
  return "emulated: this CPU has neither AVX512-BF16 nor AMX" +
         (bf16_matmul_impl().empty() ? std::string() : " (oneDNN would use " + bf16_matmul_impl() + ")") +
         ", so the GEMMs run in fp32 on bf16-rounded inputs: the same products, no faster than fp32";
}

const char* bf16_path_name(Bf16Path path) {
  return path == Bf16Path::native ? "oneDNN bf16 matmul" : "emulated (bf16-rounded inputs, fp32 GEMM)";
}

Bf16Gemm::Bf16Gemm() : path_(bf16_gemm_path()) {
  if (path_ == Bf16Path::native) native_ = std::make_unique<Native>();
}
Bf16Gemm::~Bf16Gemm() = default;

void Bf16Gemm::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                    int ldb, float beta, float* C, int ldc, bool reuse_a) {
  if (M <= 0 || N <= 0) return;
  const Stored a = stored_shape(ta, M, K), b = stored_shape(tb, K, N);
  if (path_ == Bf16Path::emulated) {
    grow(a_rounded_, size_t(a.rows) * a.cols);
    grow(b_rounded_, size_t(b.rows) * b.cols);
    if (!reuse_a) round_rows_to_bf16(a_rounded_.data(), a.cols, A, lda, a.rows, a.cols);
    round_rows_to_bf16(b_rounded_.data(), b.cols, B, ldb, b.rows, b.cols);
    canonlab::gemm(ta, tb, M, N, K, alpha, a_rounded_.data(), a.cols, b_rounded_.data(), b.cols, beta, C, ldc);
    return;
  }
  grow(a_bits_, size_t(a.rows) * a.cols);
  grow(b_bits_, size_t(b.rows) * b.cols);
  if (!reuse_a) rows_to_bf16(a_bits_.data(), a.cols, A, lda, a.rows, a.cols);
  rows_to_bf16(b_bits_.data(), b.cols, B, ldb, b.rows, b.cols);
  dnnl::matmul& mm = native_->primitive(ta, tb, M, N, K, alpha, beta);
  // A strided C goes through a dense copy (its old values first where beta needs them).
  const bool dense = ldc == N;
  float* c = C;
  if (!dense) {
    grow(native_->c_dense, size_t(M) * N);
    c = native_->c_dense.data();
    if (beta != 0.f) copy_rows(c, N, C, ldc, M, N);
  }
  using dt = dnnl::memory::data_type;
  dnnl::memory src(strided_desc(dt::bf16, M, K, ta, a.cols), native_->engine, a_bits_.data());
  dnnl::memory weights(strided_desc(dt::bf16, K, N, tb, b.cols), native_->engine, b_bits_.data());
  dnnl::memory dst(strided_desc(dt::f32, M, N, false, N), native_->engine, c);
  mm.execute(native_->stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
  native_->stream.wait();
  if (!dense) copy_rows(C, ldc, c, N, M, N);
}

// ---- the linear layer ---------------------------------------------------------------------------------------------

void linear_forward_bf16(Bf16Gemm& g, float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N,
                         int IN, int OUT) {
  if (N <= 0 || OUT <= 0) return;
  if (b) linear_bias_fill(y, ldy, b, N, OUT);
  // y (N, OUT) = x (N, IN) @ w^T (IN, OUT)
  g.gemm(false, true, N, OUT, IN, 1.f, x, ldx, w, IN, b ? 1.f : 0.f, y, ldy);
}

void linear_backward_bf16(Bf16Gemm& g, float* dx, int lddx, float* dw, float* db, const float* dy, int lddy,
                          const float* x, int ldx, const float* w, int N, int IN, int OUT) {
  if (N <= 0) return;
  // dx (N, IN) = dy (N, OUT) @ w (OUT, IN)
  if (dx) g.gemm(false, false, N, IN, OUT, 1.f, dy, lddy, w, IN, 0.f, dx, lddx);
  // dw (OUT, IN) += dy^T (OUT, N) @ x (N, IN)
  // dy was converted for dx just before, stored the same way (N, OUT): converted once.
  g.gemm(true, false, OUT, IN, N, 1.f, dy, lddy, x, ldx, 1.f, dw, IN, /*reuse_a=*/dx != nullptr);
  // The bias gradient is not a GEMM: fp32 inputs, double sums, as in the fp32 linear layer.
  if (db) linear_bias_backward(db, dy, lddy, N, OUT);
}

void gemm_bf16_naive(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                     int ldb, float beta, float* C, int ldc) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++) {
        const float a = round_to_bf16(ta ? A[size_t(k) * lda + m] : A[size_t(m) * lda + k]);
        const float b = round_to_bf16(tb ? B[size_t(n) * ldb + k] : B[size_t(k) * ldb + n]);
        acc += double(a) * double(b);
      }
      float& c = C[size_t(m) * ldc + n];
      c = float(alpha * acc + (beta == 0.f ? 0.0 : double(beta) * double(c)));
    }
}

}  // namespace canonlab
