#pragma once
// The CPU backend: every op of Backend<T> is one of the kernels in src/engine/ops/ (OpenMP, oneDNN/OpenBLAS GEMMs),
// called with the same arguments the modules passed before the seam, so fp32 results are unchanged bit for bit.
// T = double (the gradient checks) runs the same code. Its memory is host RAM.
#include <memory>
#include <string>
#include <type_traits>

#include "engine/backend/backend.h"
#include "engine/error.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/activation/rows.h"
#include "engine/ops/adamw/adamw.h"
#include "engine/ops/attention/fast.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/canon_conv/fused.h"
#include "engine/ops/dynamic_conv/fast.h"
#include "engine/ops/dynamic_conv/lowrank.h"
#include "engine/ops/cross_entropy/masked.h"
#include "engine/ops/delta_rule/chunked.h"
#include "engine/ops/delta_rule/inputs.h"
#include "engine/ops/elementwise/elementwise.h"
#include "engine/ops/embedding/fast.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "engine/ops/gla/chunked.h"
#include "engine/ops/gla/gates.h"
#include "engine/ops/int8_linear/fast.h"
#include "engine/ops/linear/bf16.h"
#include "engine/ops/linear/fast.h"
#include "engine/ops/norm/fast.h"
#include "engine/ops/rope/rope.h"
#include "engine/ops/short_conv/short_conv.h"
#include "engine/ops/ssd/chunked.h"
#include "engine/ops/token_shift/token_shift.h"
#include "engine/ops/repeat_heads/repeat_heads.h"
#include "engine/ops/ssd/mamba2_io.h"
#include "engine/threads.h"

namespace canonlab {

template <class T>
class CpuBackend : public Backend<T> {
 public:
  explicit CpuBackend(Precision precision = Precision::fp32) : precision_(precision) {
    CANONLAB_CHECK((precision == Precision::fp32 || std::is_same_v<T, float>),
                   "train.precision: bf16 runs in float; the double backend (gradient checks) is fp32 only");
    if (precision == Precision::bf16) bf16_ = std::make_unique<Bf16Gemm>();
  }

  DeviceMemory& memory() override { return host_memory(); }
  Precision precision() const override { return precision_; }
  std::string name() const override { return "cpu"; }
  // The reference backend runs everything, the reference scans on its host memory included.
  bool supports(OpGroup) const override { return true; }

  // Free kernels and these methods share names; `canonlab::` picks the kernel.
  void linear_forward(T* y, int ldy, const T* x, int ldx, const T* w, const T* b, int N, int IN, int OUT) override {
    if constexpr (std::is_same_v<T, float>)
      if (bf16_) return canonlab::linear_forward_bf16(*bf16_, y, ldy, x, ldx, w, b, N, IN, OUT);
    canonlab::linear_forward(y, ldy, x, ldx, w, b, N, IN, OUT);
  }
  void linear_forward_int8(T* y, int ldy, const T* x, int ldx, const int8_t* wq, const float* scale, const T* b,
                           int N, int IN, int OUT) override {
    canonlab::int8_linear_forward(y, ldy, x, ldx, wq, scale, b, N, IN, OUT);
  }
  void linear_backward(T* dx, int lddx, T* dw, T* db, const T* dy, int lddy, const T* x, int ldx, const T* w, int N,
                       int IN, int OUT) override {
    if constexpr (std::is_same_v<T, float>)
      if (bf16_) return canonlab::linear_backward_bf16(*bf16_, dx, lddx, dw, db, dy, lddy, x, ldx, w, N, IN, OUT);
    canonlab::linear_backward(dx, lddx, dw, db, dy, lddy, x, ldx, w, N, IN, OUT);
  }
  void round_to_bf16(T* dst, const T* src, size_t n) override {
    // each value on its own: the result does not depend on the thread count
#pragma omp parallel for schedule(static) if (n >= (size_t(1) << 14))
    for (size_t i = 0; i < n; i++) dst[i] = T(canonlab::round_to_bf16(float(src[i])));
  }

  void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int N, int C, T eps) override {
    canonlab::rmsnorm_forward(y, rstd, x, w, N, C, eps);
  }
  void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int N, int C) override {
    canonlab::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
  }
  void add_rmsnorm_forward(T* sum, T* y, T* rstd, const T* a, const T* b, const T* w, int N, int C, T eps) override {
    canonlab::add_rmsnorm_forward(sum, y, rstd, a, b, w, N, C, eps);
  }
  void rmsnorm_backward_add(T* dx, T* dw, const T* dy, const T* dres, const T* x, const T* w, const T* rstd, int N,
                            int C) override {
    canonlab::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C, dres);
  }
  void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C, T eps) override {
    canonlab::layernorm_forward(y, mean, rstd, x, w, b, N, C, eps);
  }
  void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, int N,
                          int C) override {
    canonlab::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
  }
  void gated_rmsnorm_forward(T* y, T* rstd, const T* x, const T* z, const T* w, int N, int G, int Cg, int Cw, T eps,
                             GateOrder order) override {
    canonlab::gated_rmsnorm_forward(y, rstd, x, z, w, N, G, Cg, Cw, eps, order);
  }
  void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w, const T* rstd,
                              int N, int G, int Cg, int Cw, GateOrder order) override {
    canonlab::gated_rmsnorm_backward(dx, dz, dw, dy, x, z, w, rstd, N, G, Cg, Cw, order);
  }

  void rope_forward(T* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base) override {
    canonlab::rope_forward(x, ld, B, Tn, H, D, rope_dim, base);
  }
  void rope_backward(T* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base) override {
    canonlab::rope_backward(dx, ld, B, Tn, H, D, rope_dim, base);
  }
  size_t attention_state_size(int B, int Tn, int H) const override {
    return canonlab::attention_state_size(B, Tn, H);
  }
  size_t attention_scratch_size(int Tn) const override { return canonlab::attention_scratch_size(Tn, thread_count()); }
  void attention_forward(T* out, T* state, T* probs, const T* q, const T* k, const T* v, int ld_qkv,
                         const T* alibi_slopes, int window, int B, int Tn, int H, int D, T scale, T* scratch) override {
    canonlab::attention_forward(out, state, probs, q, k, v, ld_qkv, alibi_slopes, window, B, Tn, H, D, scale, scratch);
  }
  void attention_backward(T* dq, T* dk, T* dv, int ld_dqkv, const T* dout, const T* out, const T* state, const T* q,
                          const T* k, const T* v, int ld_qkv, const T* alibi_slopes, int window, int B, int Tn, int H,
                          int D, T scale, T* scratch) override {
    canonlab::attention_backward(dq, dk, dv, ld_dqkv, dout, state, q, k, v, ld_qkv, alibi_slopes, window, B, Tn, H, D,
                                 scale, scratch);
  }

  void canon_conv_forward(T* out, const T* in, const T* weight, int B, int Tn, int C, int K, int G) override {
    canonlab::canon_conv_forward(out, in, weight, B, Tn, C, K, G);
  }
  void canon_conv_backward(T* din, T* dweight, const T* dout, const T* in, const T* weight, int B, int Tn, int C, int K,
                           int G) override {
    canonlab::canon_conv_backward(din, dweight, dout, in, weight, B, Tn, C, K, G);
  }
  bool has_fused_canon() const override { return fused_canon_; }
  size_t canon_fused_scratch_size(int B, int Tn, int C, int K, int G, CanonEpilogue ep) const override {
    return canonlab::canon_fused_scratch_size(B, Tn, C, K, G, ep);
  }
  void canon_fused_forward(T* out, T* conv, T* mean, T* rstd, const T* in, const T* weight, const T* norm_w,
                           const T* norm_b, int B, int Tn, int C, int K, int G, CanonEpilogue ep, T eps) override {
    canonlab::canon_fused_forward(out, conv, mean, rstd, in, weight, norm_w, norm_b, B, Tn, C, K, G, ep, eps);
  }
  void canon_fused_backward(T* din, T* dweight, T* dnorm_w, T* dnorm_b, T* scratch, const T* dout, const T* in,
                            const T* conv, const T* weight, const T* norm_w, const T* mean, const T* rstd, int B,
                            int Tn, int C, int K, int G, CanonEpilogue ep) override {
    canonlab::canon_fused_backward(din, dweight, dnorm_w, dnorm_b, scratch, dout, in, conv, weight, norm_w, mean,
                                   rstd, B, Tn, C, K, G, ep);
  }
  // Off: CanonLayer takes the separate ops, as a backend without the fused op would (tests and benchmarks compare
  // the two; the bits are the same).
  void set_fused_canon(bool on) { fused_canon_ = on; }
  void dynamic_conv_forward(T* out, const T* in, const T* delta, int B, int Tn, int C, int K) override {
    canonlab::dynamic_conv_forward(out, in, delta, B, Tn, C, K);
  }
  void dynamic_conv_backward(T* din, T* ddelta, const T* dout, const T* in, const T* delta, int B, int Tn, int C,
                             int K) override {
    canonlab::dynamic_conv_backward(din, ddelta, dout, in, delta, B, Tn, C, K);
  }
  bool has_lowrank_dynamic_conv() const override { return lowrank_dynamic_; }
  void dynamic_conv_lowrank_forward(T* out, const T* in, const T* z, const T* up, int B, int Tn, int C, int K,
                                    int R) override {
    canonlab::dynamic_conv_lowrank_forward(out, in, z, up, B, Tn, C, K, R);
  }
  void dynamic_conv_lowrank_backward(T* din, T* dz, T* dup, const T* dout, const T* in, const T* z, const T* up, int B,
                                     int Tn, int C, int K, int R) override {
    canonlab::dynamic_conv_lowrank_backward(din, dz, dup, dout, in, z, up, B, Tn, C, K, R);
  }
  // Off: DynamicCanonMap forms the offsets with a GEMM and calls dynamic_conv_forward/backward, as a backend without
  // the low-rank op would (tests and benchmarks compare the two).
  void set_lowrank_dynamic_conv(bool on) { lowrank_dynamic_ = on; }
  void short_conv_bias_act_forward(T* y, int ldy, T* pre, const T* bias, int N, int C, bool silu) override {
    canonlab::short_conv_bias_act_forward(y, ldy, pre, bias, N, C, silu);
  }
  void short_conv_act_backward(T* dpre, const T* dy, int lddy, const T* pre, int N, int C, bool silu) override {
    canonlab::short_conv_act_backward(dpre, dy, lddy, pre, N, C, silu);
  }
  void short_conv_bias_backward(T* db, const T* dpre, int N, int C) override {
    canonlab::short_conv_bias_backward(db, dpre, N, C);
  }

  void gelu_forward(T* y, const T* x, size_t n) override { canonlab::gelu_forward(y, x, n); }
  void gelu_backward(T* dx, const T* dy, const T* x, size_t n) override { canonlab::gelu_backward(dx, dy, x, n); }
  void silu_forward(T* y, const T* x, size_t n) override { canonlab::silu_forward(y, x, n); }
  void silu_backward(T* dx, const T* dy, const T* x, size_t n) override { canonlab::silu_backward(dx, dy, x, n); }
  void relu2_forward(T* y, const T* x, size_t n) override { canonlab::relu2_forward(y, x, n); }
  void relu2_backward(T* dx, const T* dy, const T* x, size_t n) override { canonlab::relu2_backward(dx, dy, x, n); }
  void elu_forward(T* y, const T* x, size_t n) override { canonlab::elu_forward(y, x, n); }
  void elu_backward(T* dx, const T* dy, const T* x, size_t n) override { canonlab::elu_backward(dx, dy, x, n); }
  void swiglu_forward(T* y, const T* gate_up, int N, int Hd) override { canonlab::swiglu_forward(y, gate_up, N, Hd); }
  void swiglu_backward(T* dgate_up, const T* dy, const T* gate_up, int N, int Hd) override {
    canonlab::swiglu_backward(dgate_up, dy, gate_up, N, Hd);
  }
  void sign_forward_rows(T* y, int ldy, const T* x, int ldx, int N, int width) override {
    canonlab::sign_forward_rows(y, ldy, x, ldx, N, width);
  }
  void sign_ste_backward_rows(T* dx, int lddx, const T* dy, int lddy, const T* x, int ldx, int N, int width,
                              bool clipped) override {
    canonlab::sign_ste_backward_rows(dx, lddx, dy, lddy, x, ldx, N, width, clipped);
  }

  void embedding_forward(T* out, const int* tokens, const T* table, int N, int C, int V) override {
    canonlab::embedding_forward(out, tokens, table, N, C);
  }
  void embedding_backward(T* dtable, const T* dout, const int* tokens, int N, int C, int V) override {
    canonlab::embedding_backward(dtable, dout, tokens, N, C);
  }
  void masked_cross_entropy(T* losses, T* dlosses, T* dlogits, const T* logits, const int* targets, const float* mask,
                            int N, int V, const double* denominator, double* loss) override {
    *loss = canonlab::masked_cross_entropy(losses, dlosses, dlogits, logits, targets, mask, N, V,
                                           denominator ? *denominator : 0.0);
  }

  void add(T* out, const T* a, const T* b, size_t n) override { canonlab::add(out, a, b, n); }
  void add_into(T* dst, const T* src, size_t n) override { canonlab::add_into(dst, src, n); }
  void copy(T* dst, const T* src, size_t n) override { canonlab::copy(dst, src, n); }
  void fill_zero(T* dst, size_t n) override { canonlab::fill_zero(dst, n); }
  void copy_rows(T* dst, int ldd, const T* src, int lds, int rows, int cols) override {
    canonlab::copy_rows(dst, ldd, src, lds, rows, cols);
  }
  void shift_add_forward(T* xs, const T* x, int B, int Tn, int C, int offset) override {
    canonlab::shift_add_forward(xs, x, B, Tn, C, offset);
  }
  void shift_add_backward(T* dx, const T* dxs, int B, int Tn, int C, int offset) override {
    canonlab::shift_add_backward(dx, dxs, B, Tn, C, offset);
  }
  void add_positions(T* x, const T* pe, int B, int Tn, int C) override { canonlab::add_positions(x, pe, B, Tn, C); }
  void token_shift_forward(T* y, int ldy, const T* x, int ldx, const T* coef, const TokenShift& shift, int B, int Tn,
                           int H, int D) override {
    canonlab::token_shift_forward(y, ldy, x, ldx, coef, shift, B, Tn, H, D);
  }
  void token_shift_backward(T* dx, int lddx, T* dcoef, const T* dy, int lddy, const T* x, int ldx, const T* coef,
                            const TokenShift& shift, int B, int Tn, int H, int D) override {
    canonlab::token_shift_backward(dx, lddx, dcoef, dy, lddy, x, ldx, coef, shift, B, Tn, H, D);
  }
  void add_positions_backward(T* dpe, const T* dx, int B, int Tn, int C) override {
    canonlab::add_positions_backward(dpe, dx, B, Tn, C);
  }
  void repeat_heads_forward(T* y, int ldy, const T* x, int ldx, int N, int heads, int group, int D) override {
    canonlab::repeat_heads_forward(y, ldy, x, ldx, N, heads, group, D);
  }
  void repeat_heads_backward(T* dx, int lddx, const T* dy, int lddy, int N, int heads, int group, int D) override {
    canonlab::repeat_heads_backward(dx, lddx, dy, lddy, N, heads, group, D);
  }

  size_t ssd_states_size(int B, int Tn, int H, int P, int N, int chunk) const override {
    return canonlab::ssd_states_size(B, Tn, H, P, N, chunk);
  }
  void ssd_forward_chunked(T* y, T* states, const T* x, const T* dt, const T* A, const T* Bm, const T* Cm, int B,
                           int Tn, int H, int P, int G, int N, int chunk) override {
    canonlab::ssd_forward_chunked(y, states, x, dt, A, Bm, Cm, B, Tn, H, P, G, N, chunk);
  }
  void ssd_backward_chunked(T* dx, T* ddt, T* dA, T* dB, T* dC, const T* dy, const T* states, const T* x, const T* dt,
                            const T* A, const T* Bm, const T* Cm, int B, int Tn, int H, int P, int G, int N,
                            int chunk) override {
    canonlab::ssd_backward_chunked(dx, ddt, dA, dB, dC, dy, states, x, dt, A, Bm, Cm, B, Tn, H, P, G, N, chunk);
  }
  void mamba2_split_forward(T* x, T* Bm, T* Cm, T* z, T* dt, const T* xbc, int ld_xbc, const T* mixed,
                            const T* dt_bias, int N, int Dp, int Di, int GN, int CD, int H) override {
    canonlab::mamba2_split_forward(x, Bm, Cm, z, dt, xbc, ld_xbc, mixed, dt_bias, N, Dp, Di, GN, CD, H);
  }
  void ssd_decay_rates(T* A, const T* A_log, int H) override { canonlab::ssd_decay_rates(A, A_log, H); }
  void ssd_decay_rates_backward(T* dA_log, const T* dA, const T* A, int H) override {
    canonlab::ssd_decay_rates_backward(dA_log, dA, A, H);
  }
  void mamba2_skip_forward(T* y, const T* D, const T* x, int N, int H, int P) override {
    canonlab::mamba2_skip_forward(y, D, x, N, H, P);
  }
  void mamba2_split_backward(T* dxbc, int ld_dxbc, T* dmixed, T* ddt_bias, T* dD, const T* dx, const T* dy,
                             const T* dB, const T* dC, const T* dz, const T* ddt, const T* mixed, const T* dt_bias,
                             const T* D, const T* x, int N, int Dp, int Di, int GN, int CD, int H, int P) override {
    canonlab::mamba2_split_backward(dxbc, ld_dxbc, dmixed, ddt_bias, dD, dx, dy, dB, dC, dz, ddt, mixed, dt_bias, D, x,
                                    N, Dp, Di, GN, CD, H, P);
  }

  size_t gla_states_size(int B, int Tn, int H, int K, int V, int chunk) const override {
    return canonlab::gla_states_size(B, Tn, H, K, V, chunk);
  }
  void gla_forward_chunked(T* o, T* states, const T* q, const T* k, const T* v, const T* g, int B, int Tn, int H, int K,
                           int V, T scale, int chunk) override {
    canonlab::gla_forward_chunked(o, states, q, k, v, g, B, Tn, H, K, V, scale, chunk);
  }
  void gla_backward_chunked(T* dq, T* dk, T* dv, T* dg, const T* dout, const T* states, const T* q, const T* k,
                            const T* v, const T* g, int B, int Tn, int H, int K, int V, T scale, int chunk) override {
    canonlab::gla_backward_chunked(dq, dk, dv, dg, dout, states, q, k, v, g, B, Tn, H, K, V, scale, chunk);
  }
  void gla_feature_forward(T* q, T* k, T* v, const T* qkv, int N, int Kd, int Vd, FeatureMap fm) override {
    canonlab::gla_feature_forward(q, k, v, qkv, N, Kd, Vd, fm);
  }
  void gla_feature_backward(T* dqkv, const T* dq, const T* dk, const T* dv, const T* qkv, int N, int Kd, int Vd,
                            FeatureMap fm) override {
    canonlab::gla_feature_backward(dqkv, dq, dk, dv, qkv, N, Kd, Vd, fm);
  }
  void gla_gate_forward(T* gk, const T* logit, size_t n, double normalizer, double clamp_min) override {
    canonlab::gla_gate_forward(gk, logit, n, normalizer, clamp_min);
  }
  void gla_gate_backward(T* dlogit, const T* dg, const T* logit, size_t n, double normalizer,
                         double clamp_min) override {
    canonlab::gla_gate_backward(dlogit, dg, logit, n, normalizer, clamp_min);
  }

  size_t delta_rule_states_size(int B, int Tn, int H, int K, int V, int chunk) const override {
    return canonlab::delta_rule_states_size(B, Tn, H, K, V, chunk);
  }
  void delta_rule_forward_chunked(T* o, T* states, const T* q, const T* k, const T* v, const T* beta, const T* g, int B,
                                  int Tn, int H, int K, int V, T scale, int chunk) override {
    canonlab::delta_rule_forward_chunked(o, states, q, k, v, beta, g, B, Tn, H, K, V, scale, chunk);
  }
  void delta_rule_backward_chunked(T* dq, T* dk, T* dv, T* dbeta, T* dg, const T* dout, const T* states, const T* q,
                                   const T* k, const T* v, const T* beta, const T* g, int B, int Tn, int H, int K,
                                   int V, T scale, int chunk) override {
    canonlab::delta_rule_backward_chunked(dq, dk, dv, dbeta, dg, dout, states, q, k, v, beta, g, B, Tn, H, K, V, scale,
                                          chunk);
  }
  void delta_inputs_forward(T* q, T* k, T* v, T* q_rstd, T* k_rstd, T* beta, T* g, const T* qkv, const T* beta_logit,
                            const T* a_logit, const T* A_log, const T* dt_bias, int N, int H, int K, int Vd,
                            double beta_scale) override {
    canonlab::delta_inputs_forward(q, k, v, q_rstd, k_rstd, beta, g, qkv, beta_logit, a_logit, A_log, dt_bias, N, H, K,
                                   Vd, beta_scale);
  }
  void delta_beta_backward(T* dlogit, const T* dbeta, const T* beta_logit, size_t n, double beta_scale) override {
    canonlab::delta_beta_backward(dlogit, dbeta, beta_logit, n, beta_scale);
  }
  void delta_decay_backward(T* du, T* dA_log, T* ddt_bias, const T* dg, const T* a_logit, const T* g, const T* A_log,
                            const T* dt_bias, int N, int H) override {
    canonlab::delta_decay_backward(du, dA_log, ddt_bias, dg, a_logit, g, A_log, dt_bias, N, H);
  }
  void delta_inputs_backward(T* dqkv, const T* dq, const T* dk, const T* dv, const T* q, const T* k, const T* q_rstd,
                             const T* k_rstd, int N, int H, int K, int Vd) override {
    canonlab::delta_inputs_backward(dqkv, dq, dk, dv, q, k, q_rstd, k_rstd, N, H, K, Vd);
  }

  void grad_sum_squares(const T* g, size_t n, double* sumsq) override { *sumsq = canonlab::sum_of_squares(g, n); }
  void clip_grad_norm(T* g, size_t n, const double* sumsq, double max_norm) override {
    const double coef = clip_coefficient(std::sqrt(*sumsq), max_norm);
    if (coef < 1.0) canonlab::scale(g, n, coef);
  }
  void scale(T* x, size_t n, double coef) override { canonlab::scale(x, n, coef); }
  void step_guard(int32_t* halted_at, const int32_t* step, const double* values, int n) override {
    canonlab::step_guard(halted_at, step, values, n);
  }
  void adamw_update(T* params, const T* grads, float* m, float* v, const uint8_t* decay, size_t n,
                    const AdamWCoefficients* c, const int32_t* halted_at) override {
    if (*halted_at < 0) canonlab::adamw_update(params, grads, m, v, decay, n, *c);
  }
  size_t first_non_finite(const T* x, size_t n) override { return canonlab::first_non_finite(x, n); }

 private:
  Precision precision_;
  // bf16 precision: the GEMM of engine/ops/linear/bf16.h (oneDNN's bf16 matmul where this CPU has one, else bf16-
  // rounded inputs through the fp32 GEMM), with its primitive cache and conversion scratch; null in fp32.
  std::unique_ptr<Bf16Gemm> bf16_;
  bool fused_canon_ = true;
  bool lowrank_dynamic_ = true;
};

}  // namespace canonlab
