// The stand-in's ops of the Transformer family and the optimizer (host_cuda.h): each is the CPU kernel under the CUDA
// op's contract (cuda.h), on the host storage of the device ranges the contract names.
#include <cmath>
#include <cstring>
#include <vector>

#include "device.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/activation/rows.h"
#include "engine/ops/adamw/adamw.h"
#include "engine/ops/attention/fast.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/cross_entropy/cross_entropy.h"
#include "engine/ops/dynamic_conv/fast.h"
#include "engine/ops/elementwise/element_kernels.h"
#include "engine/ops/elementwise/elementwise.h"
#include "engine/ops/embedding/fast.h"
#include "engine/ops/linear/bf16.h"
#include "engine/ops/linear/fast.h"
#include "engine/ops/norm/fast.h"
#include "engine/ops/rope/rope.h"
#include "engine/threads.h"
#include "host_cuda.h"

namespace canonlab::cuda_host {

namespace {

std::vector<float> from_bf16(const Bf16* x, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i++) out[i] = bf16_to_float(bf16_bits(x[i]));
  return out;
}

// The attention state of the CPU kernel, (B, H, Tn, 2) = (max, 1/sum), from the flash kernel's log-sum-exp: with max
// = lse and 1/sum = 1 the CPU backward recomputes p = exp(s − lse).
std::vector<float> cpu_state_from_lse(const float* lse, size_t rows) {
  std::vector<float> state(2 * rows);
  for (size_t i = 0; i < rows; i++) state[2 * i] = lse[i], state[2 * i + 1] = 1.f;
  return state;
}

}  // namespace

// ---- linear (the Gemm's stream orders them) ----

void linear_forward(Gemm& gemm, float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N,
                    int IN, int OUT) {
  enqueue(gemm.stream(), "linear_forward", [=] {
    canonlab::linear_forward(need(y, strided(N, OUT, ldy), "y"), ldy, need(x, strided(N, IN, ldx), "x"), ldx,
                             need(w, size_t(OUT) * IN, "w"), dev(b, OUT, "b"), N, IN, OUT);
  });
}

void linear_backward(Gemm& gemm, float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x,
                     int ldx, const float* w, int N, int IN, int OUT) {
  if (db) gemm.ones(size_t(N));  // the real one's bias gradient is a GEMV with the ones vector
  enqueue(gemm.stream(), "linear_backward", [=] {
    canonlab::linear_backward(dev(dx, strided(N, IN, lddx), "dx"), lddx, need(dw, size_t(OUT) * IN, "dw"),
                              dev(db, OUT, "db"), need(dy, strided(N, OUT, lddy), "dy"), lddy,
                              need(x, strided(N, IN, ldx), "x"), ldx, need(w, size_t(OUT) * IN, "w"), N, IN, OUT);
  });
}

void linear_forward_bf16(Gemm& gemm, float* y, int ldy, const Bf16* x, int ldx, const Bf16* w, const float* b, int N,
                         int IN, int OUT) {
  enqueue(gemm.stream(), "linear_forward_bf16", [=] {
    const std::vector<float> xf = from_bf16(need(x, strided(N, IN, ldx), "x"), strided(N, IN, ldx));
    const std::vector<float> wf = from_bf16(need(w, size_t(OUT) * IN, "w"), size_t(OUT) * IN);
    canonlab::linear_forward(need(y, strided(N, OUT, ldy), "y"), ldy, xf.data(), ldx, wf.data(), dev(b, OUT, "b"), N,
                             IN, OUT);
  });
}

void linear_backward_bf16(Gemm& gemm, float* dx, int lddx, float* dw, const Bf16* dy, int lddy, const Bf16* x, int ldx,
                          const Bf16* w, int N, int IN, int OUT) {
  enqueue(gemm.stream(), "linear_backward_bf16", [=] {
    const std::vector<float> dyf = from_bf16(need(dy, strided(N, OUT, lddy), "dy"), strided(N, OUT, lddy));
    const std::vector<float> xf = from_bf16(need(x, strided(N, IN, ldx), "x"), strided(N, IN, ldx));
    const std::vector<float> wf = from_bf16(need(w, size_t(OUT) * IN, "w"), size_t(OUT) * IN);
    canonlab::linear_backward(dev(dx, strided(N, IN, lddx), "dx"), lddx, need(dw, size_t(OUT) * IN, "dw"),
                              static_cast<float*>(nullptr), dyf.data(), lddy, xf.data(), ldx, wf.data(), N, IN, OUT);
  });
}

void bias_backward(Gemm& gemm, float* db, const float* dy, int lddy, int N, int OUT) {
  gemm.ones(size_t(N));
  enqueue(gemm.stream(), "bias_backward", [=] {
    float* d = need(db, OUT, "db");
    const float* g = need(dy, strided(N, OUT, lddy), "dy");
    for (int j = 0; j < OUT; j++) {
      float s = 0.f;
      for (int n = 0; n < N; n++) s += g[size_t(n) * lddy + j];
      d[j] += s;
    }
  });
}

// ---- norms ----

void rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  enqueue(stream, "rmsnorm_forward", [=] {
    const size_t n = size_t(N) * C;
    canonlab::rmsnorm_forward(need(y, n, "y"), need(rstd, N, "rstd"), need(x, n, "x"), dev(w, C, "w"), N, C, eps);
  });
}

void rmsnorm_backward(CudaStream stream, float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int N, int C, double* scratch) {
  enqueue(stream, "rmsnorm_backward", [=] {
    const size_t n = size_t(N) * C;
    if (dw) poison(need(scratch, norm_backward_scratch_size(N, C), "scratch"), norm_backward_scratch_size(N, C) * 8);
    canonlab::rmsnorm_backward(need(dx, n, "dx"), dev(dw, C, "dw"), need(dy, n, "dy"), need(x, n, "x"),
                               dev(w, C, "w"), need(rstd, N, "rstd"), N, C);
  });
}

void layernorm_forward(CudaStream stream, float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps) {
  enqueue(stream, "layernorm_forward", [=] {
    const size_t n = size_t(N) * C;
    canonlab::layernorm_forward(need(y, n, "y"), need(mean, N, "mean"), need(rstd, N, "rstd"), need(x, n, "x"),
                                dev(w, C, "w"), dev(b, C, "b"), N, C, eps);
  });
}

void layernorm_backward(CudaStream stream, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C, double* scratch) {
  enqueue(stream, "layernorm_backward", [=] {
    const size_t n = size_t(N) * C;
    if (dw || db)
      poison(need(scratch, norm_backward_scratch_size(N, C), "scratch"), norm_backward_scratch_size(N, C) * 8);
    canonlab::layernorm_backward(need(dx, n, "dx"), dev(dw, C, "dw"), dev(db, C, "db"), need(dy, n, "dy"),
                                 need(x, n, "x"), dev(w, C, "w"), need(mean, N, "mean"), need(rstd, N, "rstd"), N, C);
  });
}

// ---- attention ----

void rope_forward(CudaStream stream, float* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base) {
  enqueue(stream, "rope_forward", [=] {
    canonlab::rope_forward(need(x, strided(long(B) * Tn, long(H) * D, ld), "x"), ld, B, Tn, H, D, rope_dim, base);
  });
}

void rope_backward(CudaStream stream, float* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base) {
  enqueue(stream, "rope_backward", [=] {
    canonlab::rope_backward(need(dx, strided(long(B) * Tn, long(H) * D, ld), "dx"), ld, B, Tn, H, D, rope_dim, base);
  });
}

void flash_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                             float scale) {
  CANONLAB_CHECK(D <= cuda::kFlashMaxHeadDim, "flash_attention_forward: head dimension " + std::to_string(D) +
                                                  " is above " + std::to_string(cuda::kFlashMaxHeadDim));
  enqueue(stream, "flash_attention_forward", [=] {
    const size_t rows = size_t(B) * H * Tn, qkv = strided(long(B) * Tn, long(H) * D, ld_qkv);
    std::vector<float> state(2 * rows), scratch(attention_scratch_size(Tn, thread_count()));
    canonlab::attention_forward(need(out, size_t(B) * Tn * H * D, "out"), state.data(), static_cast<float*>(nullptr),
                                need(q, qkv, "q"), need(k, qkv, "k"), need(v, qkv, "v"), ld_qkv,
                                dev(alibi_slopes, H, "alibi_slopes"), window, B, Tn, H, D, scale, scratch.data());
    float* l = need(lse, rows, "lse");
    for (size_t i = 0; i < rows; i++) l[i] = state[2 * i] - std::log(state[2 * i + 1]);
  });
}

void flash_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                              float scale, float* scratch) {
  enqueue(stream, "flash_attention_backward", [=] {
    const size_t rows = size_t(B) * H * Tn, n = size_t(B) * Tn * H * D;
    const size_t qkv = strided(long(B) * Tn, long(H) * D, ld_qkv), dqkv = strided(long(B) * Tn, long(H) * D, ld_dqkv);
    poison(need(scratch, flash_attention_scratch_size(B, Tn, H), "scratch"), flash_attention_scratch_size(B, Tn, H) * 4);
    need(out, n, "out");  // read by the flash kernel's rowsum(dout ⊙ out); the CPU's backward has no use for it
    const std::vector<float> state = cpu_state_from_lse(need(lse, rows, "lse"), rows);
    std::vector<float> cpu_scratch(attention_scratch_size(Tn, thread_count()));
    canonlab::attention_backward(need(dq, dqkv, "dq"), need(dk, dqkv, "dk"), need(dv, dqkv, "dv"), ld_dqkv,
                                 need(dout, n, "dout"), state.data(), need(q, qkv, "q"), need(k, qkv, "k"),
                                 need(v, qkv, "v"), ld_qkv, dev(alibi_slopes, H, "alibi_slopes"), window, B, Tn, H, D,
                                 scale, cpu_scratch.data());
  });
}

void attention_forward(CudaStream stream, float* out, float* probs, const float* q, const float* k, const float* v,
                       int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D, float scale) {
  enqueue(stream, "attention_forward", [=] {
    const size_t rows = size_t(B) * H * Tn, qkv = strided(long(B) * Tn, long(H) * D, ld_qkv);
    std::vector<float> state(2 * rows), scratch(attention_scratch_size(Tn, thread_count()));
    canonlab::attention_forward(need(out, size_t(B) * Tn * H * D, "out"), state.data(),
                                need(probs, rows * Tn, "probs"), need(q, qkv, "q"), need(k, qkv, "k"),
                                need(v, qkv, "v"), ld_qkv, dev(alibi_slopes, H, "alibi_slopes"), window, B, Tn, H, D,
                                scale, scratch.data());
  });
}

// ---- convolutions ----

void canon_conv_forward(CudaStream stream, float* out, const float* in, const float* weight, int B, int Tn, int C,
                        int K, int G) {
  enqueue(stream, "canon_conv_forward", [=] {
    const size_t n = size_t(B) * Tn * C;
    canonlab::canon_conv_forward(need(out, n, "out"), need(in, n, "in"), need(weight, size_t(C) * (C / G) * K, "weight"),
                                 B, Tn, C, K, G);
  });
}

void canon_conv_backward(CudaStream stream, float* din, float* dweight, const float* dout, const float* in,
                         const float* weight, int B, int Tn, int C, int K, int G, double* scratch) {
  enqueue(stream, "canon_conv_backward", [=] {
    const size_t n = size_t(B) * Tn * C, w = size_t(C) * (C / G) * K;
    const size_t s = canon_conv_backward_scratch_size(B, Tn, C, K, G);
    poison(need(scratch, s, "scratch"), s * 8);
    canonlab::canon_conv_backward(need(din, n, "din"), need(dweight, w, "dweight"), need(dout, n, "dout"),
                                  need(in, n, "in"), need(weight, w, "weight"), B, Tn, C, K, G);
  });
}

void dynamic_conv_forward(CudaStream stream, float* out, const float* in, const float* delta, int B, int Tn, int C,
                          int K) {
  enqueue(stream, "dynamic_conv_forward", [=] {
    const size_t n = size_t(B) * Tn * C;
    canonlab::dynamic_conv_forward(need(out, n, "out"), need(in, n, "in"), need(delta, n * K, "delta"), B, Tn, C, K);
  });
}

void dynamic_conv_backward(CudaStream stream, float* din, float* ddelta, const float* dout, const float* in,
                           const float* delta, int B, int Tn, int C, int K) {
  enqueue(stream, "dynamic_conv_backward", [=] {
    const size_t n = size_t(B) * Tn * C;
    canonlab::dynamic_conv_backward(need(din, n, "din"), need(ddelta, n * K, "ddelta"), need(dout, n, "dout"),
                                    need(in, n, "in"), need(delta, n * K, "delta"), B, Tn, C, K);
  });
}

// ---- activations ----

#define CANONLAB_HOST_ACTIVATION(name)                                                                   \
  void name##_forward(CudaStream stream, float* y, const float* x, size_t n) {                          \
    enqueue(stream, #name "_forward", [=] { canonlab::name##_forward(need(y, n, "y"), need(x, n, "x"), n); }); \
  }                                                                                                     \
  void name##_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n) {       \
    enqueue(stream, #name "_backward", [=] {                                                            \
      canonlab::name##_backward(need(dx, n, "dx"), need(dy, n, "dy"), need(x, n, "x"), n);              \
    });                                                                                                 \
  }
CANONLAB_HOST_ACTIVATION(gelu)
CANONLAB_HOST_ACTIVATION(silu)
CANONLAB_HOST_ACTIVATION(relu2)
CANONLAB_HOST_ACTIVATION(elu)
#undef CANONLAB_HOST_ACTIVATION

void swiglu_forward(CudaStream stream, float* y, const float* gate_up, int N, int Hd) {
  enqueue(stream, "swiglu_forward", [=] {
    canonlab::swiglu_forward(need(y, size_t(N) * Hd, "y"), need(gate_up, size_t(N) * 2 * Hd, "gate_up"), N, Hd);
  });
}

void swiglu_backward(CudaStream stream, float* dgate_up, const float* dy, const float* gate_up, int N, int Hd) {
  enqueue(stream, "swiglu_backward", [=] {
    canonlab::swiglu_backward(need(dgate_up, size_t(N) * 2 * Hd, "dgate_up"), need(dy, size_t(N) * Hd, "dy"),
                              need(gate_up, size_t(N) * 2 * Hd, "gate_up"), N, Hd);
  });
}

void sign_forward_columns(CudaStream stream, float* y, int ldy, const float* x, int ldx, int rows, int cols) {
  enqueue(stream, "sign_forward_columns", [=] {
    canonlab::sign_forward_rows(need(y, strided(rows, cols, ldy), "y"), ldy, need(x, strided(rows, cols, ldx), "x"),
                                ldx, rows, cols);
  });
}

void sign_ste_backward_columns(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, const float* x,
                               int ldx, int rows, int cols, bool clipped) {
  enqueue(stream, "sign_ste_backward_columns", [=] {
    canonlab::sign_ste_backward_rows(need(dx, strided(rows, cols, lddx), "dx"), lddx,
                                     need(dy, strided(rows, cols, lddy), "dy"), lddy,
                                     need(x, strided(rows, cols, ldx), "x"), ldx, rows, cols, clipped);
  });
}

// ---- embedding and loss: a token or target outside [0, V) gives NaN (forward) or is skipped (backward), as on a
// GPU, where a kernel cannot throw ----

void embedding_forward(CudaStream stream, float* out, const int* tokens, const float* table, int N, int C, int V) {
  enqueue(stream, "embedding_forward", [=] {
    float* o = need(out, size_t(N) * C, "out");
    const int* t = need(tokens, N, "tokens");
    const float* w = need(table, size_t(V) * C, "table");
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++)
        o[size_t(n) * C + c] = t[n] >= 0 && t[n] < V ? w[size_t(t[n]) * C + c] : std::nanf("");
  });
}

void embedding_backward(CudaStream stream, float* dtable, const float* dout, const int* tokens, int N, int C, int V) {
  enqueue(stream, "embedding_backward", [=] {
    float* d = need(dtable, size_t(V) * C, "dtable");
    const float* g = need(dout, size_t(N) * C, "dout");
    const int* t = need(tokens, N, "tokens");
    for (int n = 0; n < N; n++)
      if (t[n] >= 0 && t[n] < V)
        for (int c = 0; c < C; c++) d[size_t(t[n]) * C + c] += g[size_t(n) * C + c];
  });
}

void cross_entropy_forward(CudaStream stream, float* losses, const float* logits, const int* targets, int N, int V) {
  enqueue(stream, "cross_entropy_forward", [=] {
    float* l = need(losses, N, "losses");
    const float* z = need(logits, size_t(N) * V, "logits");
    const int* t = need(targets, N, "targets");
    for (int n = 0; n < N; n++) {
      if (t[n] < 0 || t[n] >= V) l[n] = std::nanf("");
      else canonlab::cross_entropy_forward(l + n, z + size_t(n) * V, t + n, 1, V);
    }
  });
}

void cross_entropy_backward(CudaStream stream, float* dlogits, const float* logits, const int* targets,
                            const float* dlosses, int N, int V) {
  enqueue(stream, "cross_entropy_backward", [=] {
    float* d = need(dlogits, size_t(N) * V, "dlogits");
    const float* z = need(logits, size_t(N) * V, "logits");
    const int* t = need(targets, N, "targets");
    const float* dl = need(dlosses, N, "dlosses");
    for (int n = 0; n < N; n++) {
      if (t[n] < 0 || t[n] >= V) std::fill(d + size_t(n) * V, d + size_t(n + 1) * V, std::nanf(""));
      else canonlab::cross_entropy_backward(d + size_t(n) * V, z + size_t(n) * V, t + n, dl + n, 1, V);
    }
  });
}

// masked/cross_entropy.h's masked mean: Σ mask·loss and Σ mask in double, in row order
void masked_mean_loss(CudaStream stream, double* loss, float* dlosses, const float* losses, const float* mask, int N,
                      const double* denominator) {
  enqueue(stream, "masked_mean_loss", [=] {
    const float* l = need(losses, N, "losses");
    const float* m = need(mask, N, "mask");
    double total = 0, weight = 0;
    for (int i = 0; i < N; i++) {
      if (m[i] == 0.f) continue;
      total += double(m[i]) * double(l[i]);
      weight += m[i];
    }
    const double* d = dev(denominator, 1, "denominator");
    if (d && *d > 0) weight = *d;
    *need(loss, 1, "loss") = weight > 0 ? total / weight : 0.0;
    if (float* dl = dev(dlosses, N, "dlosses"))
      for (int i = 0; i < N; i++) dl[i] = weight > 0 ? float(m[i] / weight) : 0.f;
  });
}

// ---- elementwise ----

void fill_zero(CudaStream stream, float* dst, size_t n) {
  enqueue(stream, "fill_zero", [=] { canonlab::fill_zero(need(dst, n, "dst"), n); });
}
void copy(CudaStream stream, float* dst, const float* src, size_t n) {
  enqueue(stream, "copy", [=] { canonlab::copy(need(dst, n, "dst"), need(src, n, "src"), n); });
}
void add(CudaStream stream, float* out, const float* a, const float* b, size_t n) {
  enqueue(stream, "add", [=] { canonlab::add(need(out, n, "out"), need(a, n, "a"), need(b, n, "b"), n); });
}
void add_into(CudaStream stream, float* dst, const float* src, size_t n) {
  enqueue(stream, "add_into", [=] { canonlab::add_into(need(dst, n, "dst"), need(src, n, "src"), n); });
}
void scale(CudaStream stream, float* y, const float* x, float s, size_t n) {
  enqueue(stream, "scale", [=] {
    float* yy = need(y, n, "y");
    const float* xx = need(x, n, "x");
    for (size_t i = 0; i < n; i++) yy[i] = s * xx[i];
  });
}
void copy_columns(CudaStream stream, float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  enqueue(stream, "copy_columns", [=] {
    canonlab::copy_rows(need(dst, strided(rows, cols, ld_dst), "dst"), ld_dst, need(src, strided(rows, cols, ld_src), "src"),
                        ld_src, rows, cols);
  });
}
void shift_add(CudaStream stream, float* xs, const float* x, int B, int Tn, int C, int offset) {
  enqueue(stream, "shift_add", [=] {
    const size_t n = size_t(B) * Tn * C;
    canonlab::shift_add_forward(need(xs, n, "xs"), need(x, n, "x"), B, Tn, C, offset);
  });
}
void shift_add_backward(CudaStream stream, float* dx, const float* dxs, int B, int Tn, int C, int offset) {
  enqueue(stream, "shift_add_backward", [=] {
    const size_t n = size_t(B) * Tn * C;
    canonlab::shift_add_backward(need(dx, n, "dx"), need(dxs, n, "dxs"), B, Tn, C, offset);
  });
}
void convert_to_bf16(CudaStream stream, Bf16* dst, const float* src, size_t n) {
  enqueue(stream, "convert_to_bf16", [=] {
    Bf16* d = need(dst, n, "dst");
    const float* s = need(src, n, "src");
    for (size_t i = 0; i < n; i++) d[i] = Bf16(float_to_bf16(s[i]));
  });
}
void convert_columns_to_bf16(CudaStream stream, Bf16* dst, int ld_dst, const float* src, int ld_src, int rows,
                             int cols) {
  enqueue(stream, "convert_columns_to_bf16", [=] {
    Bf16* d = need(dst, strided(rows, cols, ld_dst), "dst");
    const float* s = need(src, strided(rows, cols, ld_src), "src");
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) d[size_t(r) * ld_dst + c] = Bf16(float_to_bf16(s[size_t(r) * ld_src + c]));
  });
}
void add_positions(CudaStream stream, float* x, const float* pe, int B, int Tn, int C) {
  enqueue(stream, "add_positions", [=] {
    add_positions_elements(HostLaunch{}, need(x, size_t(B) * Tn * C, "x"), need(pe, size_t(Tn) * C, "pe"), B, Tn, C);
  });
}
void add_positions_backward(CudaStream stream, float* dpe, const float* dx, int B, int Tn, int C) {
  enqueue(stream, "add_positions_backward", [=] {
    add_positions_backward_elements(HostLaunch{}, need(dpe, size_t(Tn) * C, "dpe"), need(dx, size_t(B) * Tn * C, "dx"),
                                    B, Tn, C);
  });
}
void round_to_bf16(CudaStream stream, float* dst, const float* src, size_t n) {
  enqueue(stream, "round_to_bf16", [=] {
    round_to_bf16_elements(HostLaunch{}, need(dst, n, "dst"), need(src, n, "src"), n);
  });
}
void first_non_finite(CudaStream stream, int64_t* index, const float* x, size_t n, int64_t* scratch) {
  enqueue(stream, "first_non_finite", [=] {
    int64_t* partial = need(scratch, first_non_finite_scratch_size(), "scratch");
    poison(partial, first_non_finite_scratch_size() * 8);
    first_non_finite_elements(HostLaunch{}, need(index, 1, "index"), need(x, n, "x"), n, partial);
  });
}

// ---- optimizer ----

void grad_sum_squares(CudaStream stream, double* sumsq, const float* grads, size_t n, double* scratch) {
  enqueue(stream, "grad_sum_squares", [=] {
    poison(need(scratch, grad_norm_scratch_size(), "scratch"), grad_norm_scratch_size() * 8);
    *need(sumsq, 1, "sumsq") = sum_of_squares(need(grads, n, "grads"), n);
  });
}

void clip_grad_norm(CudaStream stream, float* grads, size_t n, const double* sumsq, double max_norm) {
  if (!n || max_norm <= 0) return;
  enqueue(stream, "clip_grad_norm", [=] {
    const double coef = clip_coefficient(std::sqrt(*need(sumsq, 1, "sumsq")), max_norm);
    if (coef < 1.0) canonlab::scale(need(grads, n, "grads"), n, coef);
  });
}

void step_guard(CudaStream stream, int32_t* halted_at, const int32_t* step, const double* values, int n) {
  enqueue(stream, "step_guard", [=] {
    step_guard_elements(HostLaunch{}, need(halted_at, 1, "halted_at"), need(step, 1, "step"), need(values, n, "values"),
                        n);
  });
}

void adamw_update(CudaStream stream, float* params, float* m, float* v, const float* grads, const uint8_t* decay,
                  size_t n, const AdamWCoefficients* c, const int32_t* halted_at, Bf16* params_bf16) {
  if (!n) return;
  enqueue(stream, "adamw_update", [=] {
    if (*need(halted_at, 1, "halted_at") >= 0) return;
    float* p = need(params, n, "params");
    canonlab::adamw_update(p, need(grads, n, "grads"), need(m, n, "m"), need(v, n, "v"), need(decay, n, "decay"), n,
                           *need(c, 1, "coefficients"));
    if (Bf16* shadow = dev(params_bf16, n, "params_bf16"))
      for (size_t i = 0; i < n; i++) shadow[i] = Bf16(float_to_bf16(p[i]));
  });
}

}  // namespace canonlab::cuda_host
