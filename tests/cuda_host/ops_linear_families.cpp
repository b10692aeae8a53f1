// The stand-in's ops of the linear-time families and their glue (host_cuda.h): the element kernels the GPU runs
// (engine/ops/<op>/element_kernels.h and *_elements.h), launched on the host (HostLaunch) over the host storage of the
// device ranges each CUDA contract names.
#include "device.h"
#include "engine/ops/delta_rule/element_kernels.h"
#include "engine/ops/delta_rule/inputs_elements.h"
#include "engine/ops/gated_rmsnorm/element_kernels.h"
#include "engine/ops/gla/element_kernels.h"
#include "engine/ops/gla/gates_elements.h"
#include "engine/ops/short_conv/element_kernels.h"
#include "engine/ops/ssd/element_kernels.h"
#include "engine/ops/ssd/mamba2_io_elements.h"
#include "engine/ops/token_shift/element_kernels.h"
#include "engine/ops/repeat_heads/element_kernels.h"
#include "host_cuda.h"

namespace canonlab::cuda_host {

namespace {
// Scratch the kernels write before they read it: handed over NaN, so a region the layout forgot stays NaN.
void* scratch_bytes(void* scratch, size_t bytes) {
  std::byte* s = need(static_cast<std::byte*>(scratch), bytes, "scratch");
  poison(s, bytes);
  return s;
}
double* partials(double* scratch, size_t count) {
  double* s = need(scratch, count, "scratch");
  poison(s, count * sizeof(double));
  return s;
}
// Elements a (rows, cols) block of row stride ld spans.
size_t strided_extent(int rows, int ld, int cols) { return rows > 0 ? size_t(rows - 1) * ld + size_t(cols) : 0; }
}  // namespace

// ---- the token shift (keys and values of attention; engine/ops/token_shift) ----

void token_shift_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, const float* coef,
                         TokenShift shift, int B, int Tn, int H, int D) {
  enqueue(stream, "token_shift_forward", [=] {
    check_token_shift(shift, D);
    const int N = B * Tn, C = H * D, J = token_shift_coef_count(shift.kind, H);
    token_shift_forward_elements(HostLaunch{}, need(y, strided_extent(N, ldy, C), "y"),
                                 ldy, need(x, strided_extent(N, ldx, C), "x"), ldx,
                                 J > 0 ? need(coef, size_t(J), "coef") : coef, shift, B, Tn, H, D);
  });
}
void token_shift_backward(CudaStream stream, float* dx, int lddx, float* dcoef, const float* dy, int lddy,
                          const float* x, int ldx, const float* coef, TokenShift shift, int B, int Tn, int H, int D,
                          double* scratch) {
  enqueue(stream, "token_shift_backward", [=] {
    check_token_shift(shift, D);
    const int N = B * Tn, C = H * D, J = token_shift_coef_count(shift.kind, H);
    token_shift_backward_elements(HostLaunch{}, need(dx, strided_extent(N, lddx, C), "dx"), lddx,
                                  J > 0 ? need(dcoef, size_t(J), "dcoef") : dcoef,
                                  need(dy, strided_extent(N, lddy, C), "dy"), lddy,
                                  need(x, strided_extent(N, ldx, C), "x"), ldx,
                                  J > 0 ? need(coef, size_t(J), "coef") : coef, shift, B, Tn, H, D,
                                  partials(scratch, token_shift_backward_scratch_size(shift, H)));
  });
}

// ---- grouped-query attention's head repetition (engine/ops/repeat_heads) ----

void repeat_heads_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, int N, int heads, int group,
                          int D) {
  enqueue(stream, "repeat_heads_forward", [=] {
    check_repeat_heads(heads, group, D);
    repeat_heads_forward_elements(HostLaunch{}, need(y, strided_extent(N, ldy, heads * group * D), "y"), ldy,
                                  need(x, strided_extent(N, ldx, heads * D), "x"), ldx, N, heads, group, D);
  });
}
void repeat_heads_backward(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, int N, int heads,
                           int group, int D) {
  enqueue(stream, "repeat_heads_backward", [=] {
    check_repeat_heads(heads, group, D);
    repeat_heads_backward_elements(HostLaunch{}, need(dx, strided_extent(N, lddx, heads * D), "dx"), lddx,
                                   need(dy, strided_extent(N, lddy, heads * group * D), "dy"), lddy, N, heads, group,
                                   D);
  });
}

// ---- gated RMSNorm and the short conv's bias and activation ----

void gated_rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* z, const float* w,
                           int N, int G, int Cg, int Cw, float eps, GateOrder order) {
  enqueue(stream, "gated_rmsnorm_forward", [=] {
    const size_t n = size_t(N) * G * Cg;
    gated_rmsnorm_forward_elements(HostLaunch{}, need(y, n, "y"), need(rstd, size_t(N) * G, "rstd"), need(x, n, "x"),
                                   dev(z, n, "z"), need(w, Cw, "w"), N, G, Cg, Cw, eps, order);
  });
}

void gated_rmsnorm_backward(CudaStream stream, float* dx, float* dz, float* dw, const float* dy, const float* x,
                            const float* z, const float* w, const float* rstd, int N, int G, int Cg, int Cw,
                            GateOrder order, double* scratch) {
  enqueue(stream, "gated_rmsnorm_backward", [=] {
    const size_t n = size_t(N) * G * Cg;
    gated_rmsnorm_backward_elements(HostLaunch{}, need(dx, n, "dx"), dev(dz, n, "dz"), need(dw, Cw, "dw"),
                                    need(dy, n, "dy"), need(x, n, "x"), dev(z, n, "z"), need(w, Cw, "w"),
                                    need(rstd, size_t(N) * G, "rstd"), N, G, Cg, Cw, order,
                                    partials(scratch, gated_rmsnorm_backward_scratch_size(Cw)));
  });
}

void short_conv_bias_act_forward(CudaStream stream, float* y, int ldy, float* pre, const float* bias, int N, int C,
                                 bool silu) {
  enqueue(stream, "short_conv_bias_act_forward", [=] {
    short_conv_bias_act_forward_elements(HostLaunch{}, need(y, strided(N, C, ldy), "y"), ldy,
                                         need(pre, size_t(N) * C, "pre"), dev(bias, C, "bias"), N, C, silu);
  });
}

void short_conv_act_backward(CudaStream stream, float* dpre, const float* dy, int lddy, const float* pre, int N, int C,
                             bool silu) {
  enqueue(stream, "short_conv_act_backward", [=] {
    short_conv_act_backward_elements(HostLaunch{}, need(dpre, size_t(N) * C, "dpre"), need(dy, strided(N, C, lddy), "dy"),
                                     lddy, need(pre, size_t(N) * C, "pre"), N, C, silu);
  });
}

void short_conv_bias_backward(CudaStream stream, float* db, const float* dpre, int N, int C, double* scratch) {
  enqueue(stream, "short_conv_bias_backward", [=] {
    short_conv_bias_backward_elements(HostLaunch{}, need(db, C, "db"), need(dpre, size_t(N) * C, "dpre"), N, C,
                                      partials(scratch, short_conv_bias_backward_scratch_size(C)));
  });
}

// ---- Mamba2 ----

void ssd_forward(CudaStream stream, float* y, float* states, const float* x, const float* dt, const float* A,
                 const float* Bm, const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch) {
  enqueue(stream, "ssd_forward", [=] {
    const size_t tok = size_t(B) * Tn;
    ssd_forward_elements(HostLaunch{}, scratch_bytes(scratch, ssd_scratch_bytes(B, Tn, H, P, G, N, chunk, false)),
                         need(y, tok * H * P, "y"), need(states, ssd_states_size(B, Tn, H, P, N, chunk), "states"),
                         need(x, tok * H * P, "x"), need(dt, tok * H, "dt"), need(A, H, "A"),
                         need(Bm, tok * G * N, "Bm"), need(Cm, tok * G * N, "Cm"), B, Tn, H, P, G, N, chunk);
  });
}

void ssd_backward(CudaStream stream, float* dx, float* ddt, float* dA, float* dB, float* dC, const float* dy,
                  const float* states, const float* x, const float* dt, const float* A, const float* Bm,
                  const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch) {
  enqueue(stream, "ssd_backward", [=] {
    const size_t tok = size_t(B) * Tn;
    ssd_backward_elements(HostLaunch{}, scratch_bytes(scratch, ssd_scratch_bytes(B, Tn, H, P, G, N, chunk, true)),
                          need(dx, tok * H * P, "dx"), need(ddt, tok * H, "ddt"), need(dA, H, "dA"),
                          need(dB, tok * G * N, "dB"), need(dC, tok * G * N, "dC"), need(dy, tok * H * P, "dy"),
                          need(states, ssd_states_size(B, Tn, H, P, N, chunk), "states"), need(x, tok * H * P, "x"),
                          need(dt, tok * H, "dt"), need(A, H, "A"), need(Bm, tok * G * N, "Bm"),
                          need(Cm, tok * G * N, "Cm"), B, Tn, H, P, G, N, chunk);
  });
}

void mamba2_split_forward(CudaStream stream, float* x, float* Bm, float* Cm, float* z, float* dt, const float* xbc,
                          int ld_xbc, const float* mixed, const float* dt_bias, int N, int Dp, int Di, int GN, int CD,
                          int H) {
  enqueue(stream, "mamba2_split_forward", [=] {
    mamba2_split_forward_elements(HostLaunch{}, need(x, size_t(N) * Di, "x"), need(Bm, size_t(N) * GN, "Bm"),
                                  need(Cm, size_t(N) * GN, "Cm"), need(z, size_t(N) * Di, "z"),
                                  need(dt, size_t(N) * H, "dt"), need(xbc, strided(N, CD, ld_xbc), "xbc"), ld_xbc,
                                  need(mixed, size_t(N) * Dp, "mixed"), need(dt_bias, H, "dt_bias"), N, Dp, Di, GN, CD,
                                  H);
  });
}

void ssd_decay_rates(CudaStream stream, float* A, const float* A_log, int H) {
  enqueue(stream, "ssd_decay_rates",
          [=] { ssd_decay_rates_elements(HostLaunch{}, need(A, H, "A"), need(A_log, H, "A_log"), H); });
}

void ssd_decay_rates_backward(CudaStream stream, float* dA_log, const float* dA, const float* A, int H) {
  enqueue(stream, "ssd_decay_rates_backward", [=] {
    ssd_decay_rates_backward_elements(HostLaunch{}, need(dA_log, H, "dA_log"), need(dA, H, "dA"), need(A, H, "A"), H);
  });
}

void mamba2_skip_forward(CudaStream stream, float* y, const float* D, const float* x, int N, int H, int P) {
  enqueue(stream, "mamba2_skip_forward", [=] {
    const size_t n = size_t(N) * H * P;
    mamba2_skip_forward_elements(HostLaunch{}, need(y, n, "y"), need(D, H, "D"), need(x, n, "x"), N, H, P);
  });
}

void mamba2_split_backward(CudaStream stream, float* dxbc, int ld_dxbc, float* dmixed, float* ddt_bias, float* dD,
                           const float* dx, const float* dy, const float* dB, const float* dC, const float* dz,
                           const float* ddt, const float* mixed, const float* dt_bias, const float* D, const float* x,
                           int N, int Dp, int Di, int GN, int CD, int H, int P, double* scratch) {
  enqueue(stream, "mamba2_split_backward", [=] {
    const size_t di = size_t(N) * Di, gn = size_t(N) * GN;
    mamba2_split_backward_elements(HostLaunch{}, need(dxbc, strided(N, CD, ld_dxbc), "dxbc"), ld_dxbc,
                                   need(dmixed, size_t(N) * Dp, "dmixed"), need(ddt_bias, H, "ddt_bias"),
                                   need(dD, H, "dD"), need(dx, di, "dx"), need(dy, di, "dy"), need(dB, gn, "dB"),
                                   need(dC, gn, "dC"), need(dz, di, "dz"), need(ddt, size_t(N) * H, "ddt"),
                                   need(mixed, size_t(N) * Dp, "mixed"), need(dt_bias, H, "dt_bias"), need(D, H, "D"),
                                   need(x, di, "x"), N, Dp, Di, GN, CD, H, P,
                                   partials(scratch, mamba2_split_backward_scratch_size(H)));
  });
}

// ---- GLA ----

void gla_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                 const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk, void* scratch) {
  enqueue(stream, "gla_forward", [=] {
    const size_t tok = size_t(B) * Tn * H;
    gla_forward_elements(HostLaunch{}, scratch_bytes(scratch, gla_scratch_bytes(B, Tn, H, K, V, chunk, false)),
                         need(o, tok * V, "o"), need(states, gla_states_size(B, Tn, H, K, V, chunk), "states"),
                         need(q, tok * K, "q"), need(k, tok * K, "k"), need(v, tok * V, "v"), need(g, tok * K, "g"), B,
                         Tn, H, K, V, scale, chunk);
  });
}

void gla_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dg, const float* dout,
                  const float* states, const float* q, const float* k, const float* v, const float* g, int B, int Tn,
                  int H, int K, int V, float scale, int chunk, void* scratch) {
  enqueue(stream, "gla_backward", [=] {
    const size_t tok = size_t(B) * Tn * H;
    gla_backward_elements(HostLaunch{}, scratch_bytes(scratch, gla_scratch_bytes(B, Tn, H, K, V, chunk, true)),
                          need(dq, tok * K, "dq"), need(dk, tok * K, "dk"), need(dv, tok * V, "dv"),
                          need(dg, tok * K, "dg"), need(dout, tok * V, "dout"),
                          need(states, gla_states_size(B, Tn, H, K, V, chunk), "states"), need(q, tok * K, "q"),
                          need(k, tok * K, "k"), need(v, tok * V, "v"), need(g, tok * K, "g"), B, Tn, H, K, V, scale,
                          chunk);
  });
}

void gla_feature_forward(CudaStream stream, float* q, float* k, float* v, const float* qkv, int N, int Kd, int Vd,
                         FeatureMap fm) {
  enqueue(stream, "gla_feature_forward", [=] {
    gla_feature_forward_elements(HostLaunch{}, need(q, size_t(N) * Kd, "q"), need(k, size_t(N) * Kd, "k"),
                                 need(v, size_t(N) * Vd, "v"), need(qkv, size_t(N) * (2 * Kd + Vd), "qkv"), N, Kd, Vd,
                                 fm);
  });
}

void gla_feature_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                          const float* qkv, int N, int Kd, int Vd, FeatureMap fm) {
  enqueue(stream, "gla_feature_backward", [=] {
    gla_feature_backward_elements(HostLaunch{}, need(dqkv, size_t(N) * (2 * Kd + Vd), "dqkv"),
                                  need(dq, size_t(N) * Kd, "dq"), need(dk, size_t(N) * Kd, "dk"),
                                  need(dv, size_t(N) * Vd, "dv"), need(qkv, size_t(N) * (2 * Kd + Vd), "qkv"), N, Kd,
                                  Vd, fm);
  });
}

void gla_gate_forward(CudaStream stream, float* gk, const float* logit, size_t n, double normalizer, double clamp_min) {
  enqueue(stream, "gla_gate_forward", [=] {
    gla_gate_forward_elements(HostLaunch{}, need(gk, n, "gk"), need(logit, n, "logit"), n, normalizer, clamp_min);
  });
}

void gla_gate_backward(CudaStream stream, float* dlogit, const float* dg, const float* logit, size_t n,
                       double normalizer, double clamp_min) {
  enqueue(stream, "gla_gate_backward", [=] {
    gla_gate_backward_elements(HostLaunch{}, need(dlogit, n, "dlogit"), need(dg, n, "dg"), need(logit, n, "logit"), n,
                               normalizer, clamp_min);
  });
}

// ---- (Gated) DeltaNet ----

void delta_rule_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                        const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                        void* scratch) {
  enqueue(stream, "delta_rule_forward", [=] {
    const size_t tok = size_t(B) * Tn * H;
    delta_rule_forward_elements(
        HostLaunch{}, scratch_bytes(scratch, delta_rule_scratch_bytes(B, Tn, H, K, V, chunk, false)),
        need(o, tok * V, "o"), need(states, delta_rule_states_size(B, Tn, H, K, V, chunk), "states"),
        need(q, tok * K, "q"), need(k, tok * K, "k"), need(v, tok * V, "v"), need(beta, tok, "beta"), dev(g, tok, "g"),
        B, Tn, H, K, V, scale, chunk);
  });
}

void delta_rule_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dbeta, float* dg,
                         const float* dout, const float* states, const float* q, const float* k, const float* v,
                         const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                         void* scratch) {
  enqueue(stream, "delta_rule_backward", [=] {
    const size_t tok = size_t(B) * Tn * H;
    CANONLAB_CHECK((dg == nullptr) == (g == nullptr), "delta_rule_backward: dg must be null exactly when g is");
    delta_rule_backward_elements(
        HostLaunch{}, scratch_bytes(scratch, delta_rule_scratch_bytes(B, Tn, H, K, V, chunk, true)),
        need(dq, tok * K, "dq"), need(dk, tok * K, "dk"), need(dv, tok * V, "dv"), need(dbeta, tok, "dbeta"),
        dev(dg, tok, "dg"), need(dout, tok * V, "dout"),
        need(states, delta_rule_states_size(B, Tn, H, K, V, chunk), "states"), need(q, tok * K, "q"),
        need(k, tok * K, "k"), need(v, tok * V, "v"), need(beta, tok, "beta"), dev(g, tok, "g"), B, Tn, H, K, V, scale,
        chunk);
  });
}

void delta_inputs_forward(CudaStream stream, float* q, float* k, float* v, float* q_rstd, float* k_rstd, float* beta,
                          float* g, const float* qkv, const float* beta_logit, const float* a_logit,
                          const float* A_log, const float* dt_bias, int N, int H, int K, int Vd, double beta_scale) {
  enqueue(stream, "delta_inputs_forward", [=] {
    const size_t nh = size_t(N) * H, nk = nh * K;
    delta_inputs_forward_elements(HostLaunch{}, need(q, nk, "q"), need(k, nk, "k"), need(v, size_t(N) * Vd, "v"),
                                  need(q_rstd, nh, "q_rstd"), need(k_rstd, nh, "k_rstd"), need(beta, nh, "beta"),
                                  dev(g, nh, "g"), need(qkv, size_t(N) * (2 * H * K + Vd), "qkv"),
                                  need(beta_logit, nh, "beta_logit"), dev(a_logit, nh, "a_logit"),
                                  dev(A_log, H, "A_log"), dev(dt_bias, H, "dt_bias"), N, H, K, Vd, beta_scale);
  });
}

void delta_beta_backward(CudaStream stream, float* dlogit, const float* dbeta, const float* beta_logit, size_t n,
                         double beta_scale) {
  enqueue(stream, "delta_beta_backward", [=] {
    delta_beta_backward_elements(HostLaunch{}, need(dlogit, n, "dlogit"), need(dbeta, n, "dbeta"),
                                 need(beta_logit, n, "beta_logit"), n, beta_scale);
  });
}

void delta_decay_backward(CudaStream stream, float* du, float* dA_log, float* ddt_bias, const float* dg,
                          const float* a_logit, const float* g, const float* A_log, const float* dt_bias, int N, int H,
                          double* scratch) {
  enqueue(stream, "delta_decay_backward", [=] {
    const size_t nh = size_t(N) * H;
    delta_decay_backward_elements(HostLaunch{}, need(du, nh, "du"), need(dA_log, H, "dA_log"),
                                  need(ddt_bias, H, "ddt_bias"), need(dg, nh, "dg"), need(a_logit, nh, "a_logit"),
                                  need(g, nh, "g"), need(A_log, H, "A_log"), need(dt_bias, H, "dt_bias"), N, H,
                                  partials(scratch, delta_decay_backward_scratch_size(H)));
  });
}

void delta_inputs_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                           const float* q, const float* k, const float* q_rstd, const float* k_rstd, int N, int H,
                           int K, int Vd) {
  enqueue(stream, "delta_inputs_backward", [=] {
    const size_t nh = size_t(N) * H, nk = nh * K;
    delta_inputs_backward_elements(HostLaunch{}, need(dqkv, size_t(N) * (2 * H * K + Vd), "dqkv"), need(dq, nk, "dq"),
                                   need(dk, nk, "dk"), need(dv, size_t(N) * Vd, "dv"), need(q, nk, "q"),
                                   need(k, nk, "k"), need(q_rstd, nh, "q_rstd"), need(k_rstd, nh, "k_rstd"), N, H, K,
                                   Vd);
  });
}

}  // namespace canonlab::cuda_host
