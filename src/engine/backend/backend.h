#pragma once
// The backend seam (docs/engine.md#backends), in the spirit of ggml's backend interface: every computation a module
// does on activation or parameter memory goes through one of these ops, so a module is written once for every
// device. The CPU backend (cpu_backend.h) runs today's kernels in src/engine/ops/; a CUDA backend implements the
// same list with its own kernels over device memory.
//
// Conventions are the kernels' (src/engine/ops/README.md): every pointer is device memory of this backend's
// memory() unless its comment says host; tensors are contiguous row-major unless a row stride ld* is given; forward
// outputs and input gradients are written, parameter gradients accumulated. Every reduction is deterministic: the
// same inputs give the same bits on every run (no floating-point atomics, no schedule-dependent order).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/capabilities.h"
#include "engine/backend/memory.h"
#include "engine/error.h"
#include "engine/ops/adamw/adamw.h"
#include "engine/ops/canon_conv/epilogue.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "engine/ops/gla/gates.h"
#include "engine/ops/token_shift/element_kernels.h"
#include "engine/ops/repeat_heads/element_kernels.h"

namespace canonlab {

// train.precision. fp32: everything in fp32. bf16: the linear layers' GEMMs take bf16 inputs (the weights from a
// bf16 shadow of the fp32 master weights, the activations rounded at each GEMM) and accumulate in fp32; master
// weights, gradient reductions, AdamW moments, norms, softmax and the loss stay fp32.
enum class Precision { fp32, bf16 };

// The per-step reference recurrences of the linear families (model.recurrent.kernel: naive) are not ops of the seam:
// they are test references on host memory, which a module calls directly where supports(OpGroup::reference_scans).
template <class T>
class Backend : public BackendCapabilities {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Where this backend's tensors live; the arena, the parameter store and the optimizer allocate from it.
  virtual DeviceMemory& memory() = 0;
  virtual Precision precision() const = 0;
  // "cpu", "cuda:0": for messages and metrics
  virtual std::string name() const = 0;
  // True for the resource estimate's counting backends (counting_backend.h, engine/cuda/counting_cuda.h): they run
  // no op and their memory has no storage, so a model built on them draws no initial values.
  virtual bool counts_only() const { return false; }

  // ---- linear layers (engine/ops/linear): y = x wᵀ + b; in bf16 precision with bf16 inputs (w the shadow) ----
  virtual void linear_forward(T* y, int ldy, const T* x, int ldx, const T* w, const T* b, int N, int IN, int OUT) = 0;
  virtual void linear_backward(T* dx, int lddx, T* dw, T* db, const T* dy, int lddy, const T* x, int ldx, const T* w,
                               int N, int IN, int OUT) = 0;
  // Weight-only int8 (engine/ops/int8_linear; canonlab eval / generate --int8): y = (x · wqᵀ) ⊙ scale + b with
  // fp32 activations and accumulation; wq: (OUT, IN) int8 and scale: (OUT) are the parameter store's host copy.
  virtual void linear_forward_int8(T* y, int ldy, const T* x, int ldx, const int8_t* wq, const float* scale,
                                   const T* b, int N, int IN, int OUT) = 0;
  // dst = the bf16 rounding of src, as T (the shadow weights of bf16 precision); dst may alias src. (n)
  virtual void round_to_bf16(T* dst, const T* src, size_t n) = 0;

  // ---- norms (engine/ops/norm, engine/ops/gated_rmsnorm) ----
  virtual void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int N, int C, T eps) = 0;
  virtual void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int N, int C) = 0;
  // The residual add and the RMSNorm after it (sum = a + b; y = rmsnorm(sum)), and RMSNorm's backward with the
  // residual's gradient added (dx = rmsnorm'(dy) + dres): one pass on the CPU, the same bits as the two ops in turn,
  // which is what a backend without a fused kernel runs. sum may alias a or b; dres may not alias dx.
  virtual void add_rmsnorm_forward(T* sum, T* y, T* rstd, const T* a, const T* b, const T* w, int N, int C, T eps) {
    add(sum, a, b, size_t(N) * C);
    rmsnorm_forward(y, rstd, sum, w, N, C, eps);
  }
  virtual void rmsnorm_backward_add(T* dx, T* dw, const T* dy, const T* dres, const T* x, const T* w, const T* rstd,
                                    int N, int C) {
    rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
    add_into(dx, dres, size_t(N) * C);
  }
  virtual void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C, T eps) = 0;
  virtual void layernorm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                                  const T* rstd, int N, int C) = 0;
  virtual void gated_rmsnorm_forward(T* y, T* rstd, const T* x, const T* z, const T* w, int N, int G, int Cg, int Cw,
                                     T eps, GateOrder order) = 0;
  virtual void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w,
                                      const T* rstd, int N, int G, int Cg, int Cw, GateOrder order) = 0;

  // ---- attention (engine/ops/attention, engine/ops/rope) ----
  virtual void rope_forward(T* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base) = 0;
  virtual void rope_backward(T* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base) = 0;
  // Elements of the state attention_forward keeps for backward: what this backend saves of the softmax (the CPU:
  // each query row's max and 1/sum), never a (Tn, Tn) matrix per head, so training memory grows with T, not T².
  virtual size_t attention_state_size(int B, int Tn, int H) const = 0;
  // Elements of scratch attention_forward and attention_backward need (need not be initialised).
  virtual size_t attention_scratch_size(int Tn) const = 0;
  // state: attention_state_size(B, Tn, H), written; probs: (B, H, Tn, Tn) written only when not null (a probe
  // asks to look at them); forward's output and state are the same bits either way.
  virtual void attention_forward(T* out, T* state, T* probs, const T* q, const T* k, const T* v, int ld_qkv,
                                 const T* alibi_slopes, int window, int B, int Tn, int H, int D, T scale,
                                 T* scratch) = 0;
  // out: forward's output (B, Tn, H, D) (a flash backward reads rowsum(dout ⊙ out); the CPU does not need it)
  virtual void attention_backward(T* dq, T* dk, T* dv, int ld_dqkv, const T* dout, const T* out, const T* state,
                                  const T* q, const T* k, const T* v, int ld_qkv, const T* alibi_slopes, int window,
                                  int B, int Tn, int H, int D, T scale, T* scratch) = 0;

  // ---- convolutions (engine/ops/canon_conv, engine/ops/short_conv) ----
  virtual void canon_conv_forward(T* out, const T* in, const T* weight, int B, int Tn, int C, int K, int G) = 0;
  virtual void canon_conv_backward(T* din, T* dweight, const T* dout, const T* in, const T* weight, int B, int Tn,
                                   int C, int K, int G) = 0;
  // Dynamic Canon's per-position kernel term (engine/ops/dynamic_conv): delta: (B, Tn, C, K) each token's kernel
  // offset; out (forward) and din (backward) are accumulated onto the static conv's, ddelta written.
  virtual void dynamic_conv_forward(T* out, const T* in, const T* delta, int B, int Tn, int C, int K) = 0;
  virtual void dynamic_conv_backward(T* din, T* ddelta, const T* dout, const T* in, const T* delta, int B, int Tn,
                                     int C, int K) = 0;
  // Optional: the same term with the offsets Δ_t = U z_t formed on the fly (engine/ops/dynamic_conv/lowrank.h), so
  // the (B·Tn, C, K) offsets are never written. z: (B·Tn, R), up: (C·K, R). A backend that returns false (a CUDA
  // backend, until its kernel exists) never has the other two called, and DynamicCanonMap forms Δ with a GEMM and
  // calls dynamic_conv_forward/backward instead: the same function, other roundings.
  virtual bool has_lowrank_dynamic_conv() const { return false; }
  virtual void dynamic_conv_lowrank_forward(T* out, const T* in, const T* z, const T* up, int B, int Tn, int C, int K,
                                            int R) {
    CANONLAB_CHECK(false, name() + ": backend has no low-rank dynamic conv (has_lowrank_dynamic_conv() is false)");
  }
  // din accumulated, dz written, dup accumulated
  virtual void dynamic_conv_lowrank_backward(T* din, T* dz, T* dup, const T* dout, const T* in, const T* z,
                                             const T* up, int B, int Tn, int C, int K, int R) {
    CANONLAB_CHECK(false, name() + ": backend has no low-rank dynamic conv (has_lowrank_dynamic_conv() is false)");
  }
  virtual void short_conv_bias_act_forward(T* y, int ldy, T* pre, const T* bias, int N, int C, bool silu) = 0;
  virtual void short_conv_act_backward(T* dpre, const T* dy, int lddy, const T* pre, int N, int C, bool silu) = 0;
  virtual void short_conv_bias_backward(T* db, const T* dpre, int N, int C) = 0;

  // ---- the fused Canon layer (engine/ops/canon_conv/fused.h): out = [in +] norm(act(conv(in))) in one pass ----
  // Optional: a backend that returns false from has_fused_canon() (a CUDA backend, until its fused kernel exists)
  // never has the other three called, and CanonLayer runs the separate ops (conv, activation, norm, add) instead.
  // Where it returns true, results are bit for bit those of the separate ops.
  virtual bool has_fused_canon() const { return false; }
  // Elements of scratch canon_fused_backward needs (need not be initialised).
  virtual size_t canon_fused_scratch_size(int B, int Tn, int C, int K, int G, CanonEpilogue ep) const { return 0; }
  // conv: (B, Tn, C) the conv output kept for backward iff ep.saves_conv(); rstd (and mean for layernorm): (B·Tn)
  virtual void canon_fused_forward(T* out, T* conv, T* mean, T* rstd, const T* in, const T* weight, const T* norm_w,
                                   const T* norm_b, int B, int Tn, int C, int K, int G, CanonEpilogue ep, T eps) {
    CANONLAB_CHECK(false, name() + ": backend has no fused Canon op (has_fused_canon() is false)");
  }
  // din written; dweight, dnorm_w, dnorm_b accumulated (the norm's may be null)
  virtual void canon_fused_backward(T* din, T* dweight, T* dnorm_w, T* dnorm_b, T* scratch, const T* dout,
                                    const T* in, const T* conv, const T* weight, const T* norm_w, const T* mean,
                                    const T* rstd, int B, int Tn, int C, int K, int G, CanonEpilogue ep) {
    CANONLAB_CHECK(false, name() + ": backend has no fused Canon op (has_fused_canon() is false)");
  }

  // ---- activations (engine/ops/activation) ----
  virtual void gelu_forward(T* y, const T* x, size_t n) = 0;
  virtual void gelu_backward(T* dx, const T* dy, const T* x, size_t n) = 0;
  virtual void silu_forward(T* y, const T* x, size_t n) = 0;
  virtual void silu_backward(T* dx, const T* dy, const T* x, size_t n) = 0;
  virtual void relu2_forward(T* y, const T* x, size_t n) = 0;
  virtual void relu2_backward(T* dx, const T* dy, const T* x, size_t n) = 0;
  virtual void elu_forward(T* y, const T* x, size_t n) = 0;
  virtual void elu_backward(T* dx, const T* dy, const T* x, size_t n) = 0;
  virtual void swiglu_forward(T* y, const T* gate_up, int N, int Hd) = 0;
  virtual void swiglu_backward(T* dgate_up, const T* dy, const T* gate_up, int N, int Hd) = 0;
  // sign over the first `width` columns of N rows (sign-STE attention: the q|k columns); dx may alias dy
  virtual void sign_forward_rows(T* y, int ldy, const T* x, int ldx, int N, int width) = 0;
  virtual void sign_ste_backward_rows(T* dx, int lddx, const T* dy, int lddy, const T* x, int ldx, int N, int width,
                                      bool clipped) = 0;

  // ---- embedding and loss (engine/ops/embedding, engine/ops/cross_entropy) ----
  // table: (V, C). A token outside [0, V): the CPU throws; a GPU writes a NaN row (forward) or skips it (backward).
  virtual void embedding_forward(T* out, const int* tokens, const T* table, int N, int C, int V) = 0;
  virtual void embedding_backward(T* dtable, const T* dout, const int* tokens, int N, int C, int V) = 0;
  // *loss (one device double) = the masked mean loss; losses (N) scratch; with dlogits non-null also dlosses (N)
  // scratch and dlogits (N, V) written. denominator: a device double that replaces Σ mask when > 0 (a micro-batch of
  // a larger batch), or null (Σ mask).
  virtual void masked_cross_entropy(T* losses, T* dlosses, T* dlogits, const T* logits, const int* targets,
                                    const float* mask, int N, int V, const double* denominator, double* loss) = 0;

  // ---- elementwise and copies (engine/ops/elementwise) ----
  virtual void add(T* out, const T* a, const T* b, size_t n) = 0;  // out = a + b, may alias
  virtual void add_into(T* dst, const T* src, size_t n) = 0;       // dst += src
  virtual void copy(T* dst, const T* src, size_t n) = 0;
  virtual void fill_zero(T* dst, size_t n) = 0;
  virtual void copy_rows(T* dst, int ldd, const T* src, int lds, int rows, int cols) = 0;
  virtual void shift_add_forward(T* xs, const T* x, int B, int Tn, int C, int offset) = 0;
  virtual void shift_add_backward(T* dx, const T* dxs, int B, int Tn, int C, int offset) = 0;
  virtual void add_positions(T* x, const T* pe, int B, int Tn, int C) = 0;
  virtual void add_positions_backward(T* dpe, const T* dx, int B, int Tn, int C) = 0;

  // ---- the token-shift family on keys and values (engine/ops/token_shift): x, y (B, Tn, H, D) token rows ----
  virtual void token_shift_forward(T* y, int ldy, const T* x, int ldx, const T* coef, const TokenShift& shift, int B,
                                   int Tn, int H, int D) = 0;
  // dx written, dcoef accumulated (nullptr for the fixed kinds)
  virtual void token_shift_backward(T* dx, int lddx, T* dcoef, const T* dy, int lddy, const T* x, int ldx,
                                    const T* coef, const TokenShift& shift, int B, int Tn, int H, int D) = 0;

  // ---- grouped-query attention (engine/ops/repeat_heads): each of `heads` key/value heads repeated `group` times ----
  // x: (N, heads·D) rows of stride ldx; y: (N, heads·group·D) rows of stride ldy
  virtual void repeat_heads_forward(T* y, int ldy, const T* x, int ldx, int N, int heads, int group, int D) = 0;
  // dx (N, heads·D) written: each head's group summed in order
  virtual void repeat_heads_backward(T* dx, int lddx, const T* dy, int lddy, int N, int heads, int group, int D) = 0;

  // ---- Mamba2 (engine/ops/ssd): the SSD scan and its glue ----
  virtual size_t ssd_states_size(int B, int Tn, int H, int P, int N, int chunk) const = 0;
  virtual void ssd_forward_chunked(T* y, T* states, const T* x, const T* dt, const T* A, const T* Bm, const T* Cm,
                                   int B, int Tn, int H, int P, int G, int N, int chunk) = 0;
  virtual void ssd_backward_chunked(T* dx, T* ddt, T* dA, T* dB, T* dC, const T* dy, const T* states, const T* x,
                                    const T* dt, const T* A, const T* Bm, const T* Cm, int B, int Tn, int H, int P,
                                    int G, int N, int chunk) = 0;
  virtual void mamba2_split_forward(T* x, T* Bm, T* Cm, T* z, T* dt, const T* xbc, int ld_xbc, const T* mixed,
                                    const T* dt_bias, int N, int Dp, int Di, int GN, int CD, int H) = 0;
  virtual void ssd_decay_rates(T* A, const T* A_log, int H) = 0;
  virtual void ssd_decay_rates_backward(T* dA_log, const T* dA, const T* A, int H) = 0;
  virtual void mamba2_skip_forward(T* y, const T* D, const T* x, int N, int H, int P) = 0;
  virtual void mamba2_split_backward(T* dxbc, int ld_dxbc, T* dmixed, T* ddt_bias, T* dD, const T* dx, const T* dy,
                                     const T* dB, const T* dC, const T* dz, const T* ddt, const T* mixed,
                                     const T* dt_bias, const T* D, const T* x, int N, int Dp, int Di, int GN, int CD,
                                     int H, int P) = 0;

  // ---- GLA (engine/ops/gla) ----
  virtual size_t gla_states_size(int B, int Tn, int H, int K, int V, int chunk) const = 0;
  virtual void gla_forward_chunked(T* o, T* states, const T* q, const T* k, const T* v, const T* g, int B, int Tn,
                                   int H, int K, int V, T scale, int chunk) = 0;
  virtual void gla_backward_chunked(T* dq, T* dk, T* dv, T* dg, const T* dout, const T* states, const T* q,
                                    const T* k, const T* v, const T* g, int B, int Tn, int H, int K, int V, T scale,
                                    int chunk) = 0;
  virtual void gla_feature_forward(T* q, T* k, T* v, const T* qkv, int N, int Kd, int Vd, FeatureMap fm) = 0;
  virtual void gla_feature_backward(T* dqkv, const T* dq, const T* dk, const T* dv, const T* qkv, int N, int Kd,
                                    int Vd, FeatureMap fm) = 0;
  virtual void gla_gate_forward(T* gk, const T* logit, size_t n, double normalizer, double clamp_min) = 0;
  virtual void gla_gate_backward(T* dlogit, const T* dg, const T* logit, size_t n, double normalizer,
                                 double clamp_min) = 0;

  // ---- (Gated) DeltaNet (engine/ops/delta_rule); g and dg null for DeltaNet ----
  virtual size_t delta_rule_states_size(int B, int Tn, int H, int K, int V, int chunk) const = 0;
  virtual void delta_rule_forward_chunked(T* o, T* states, const T* q, const T* k, const T* v, const T* beta,
                                          const T* g, int B, int Tn, int H, int K, int V, T scale, int chunk) = 0;
  virtual void delta_rule_backward_chunked(T* dq, T* dk, T* dv, T* dbeta, T* dg, const T* dout, const T* states,
                                           const T* q, const T* k, const T* v, const T* beta, const T* g, int B,
                                           int Tn, int H, int K, int V, T scale, int chunk) = 0;
  virtual void delta_inputs_forward(T* q, T* k, T* v, T* q_rstd, T* k_rstd, T* beta, T* g, const T* qkv,
                                    const T* beta_logit, const T* a_logit, const T* A_log, const T* dt_bias, int N,
                                    int H, int K, int Vd, double beta_scale) = 0;
  virtual void delta_beta_backward(T* dlogit, const T* dbeta, const T* beta_logit, size_t n, double beta_scale) = 0;
  virtual void delta_decay_backward(T* du, T* dA_log, T* ddt_bias, const T* dg, const T* a_logit, const T* g,
                                    const T* A_log, const T* dt_bias, int N, int H) = 0;
  virtual void delta_inputs_backward(T* dqkv, const T* dq, const T* dk, const T* dv, const T* q, const T* k,
                                     const T* q_rstd, const T* k_rstd, int N, int H, int K, int Vd) = 0;

  // ---- optimizer and checks (engine/ops/adamw) ----
  // The scalars of a training step live in device memory, so that a whole step enqueues without the host waiting
  // for it (train/step.h reads them once per logged step).
  // *sumsq (a device double) = Σ g², in double, in a fixed order
  virtual void grad_sum_squares(const T* g, size_t n, double* sumsq) = 0;
  // g *= clip_coefficient(sqrt(*sumsq), max_norm) where that is below 1 (train/adamw.h; nothing when max_norm <= 0
  // or the norm is not finite), each value scaled in double and rounded once
  virtual void clip_grad_norm(T* g, size_t n, const double* sumsq, double max_norm) = 0;
  virtual void scale(T* x, size_t n, double coef) = 0;  // x = T(double(x) · coef)
  // The guard of a step (device int32 and doubles): when *halted_at < 0 and one of values[0..n) is not finite,
  // *halted_at = *step. Once set it stays, and adamw_update changes nothing any more: the run's parameters stay those
  // of the step that went wrong, for the host to report when it next looks.
  virtual void step_guard(int32_t* halted_at, const int32_t* step, const double* values, int n) = 0;
  // One AdamW update; c: the step's coefficients and halted_at (see step_guard) in device memory. Nothing changes
  // while *halted_at >= 0.
  virtual void adamw_update(T* params, const T* grads, float* m, float* v, const uint8_t* decay, size_t n,
                            const AdamWCoefficients* c, const int32_t* halted_at) = 0;
  // The index of the first non-finite value of x (n when all are finite), a host value: the non-finite guard's
  // diagnosis, after a step went wrong (never inside a step).
  virtual size_t first_non_finite(const T* x, size_t n) = 0;

  // ---- ordering: the step's uploads, the host's waits and whole-step graphs ----
  // A stream-ordered copy of host bytes to device memory: the host buffer may be changed as soon as this returns
  // (a GPU backend stages it through pinned memory). On host memory, a memcpy.
  virtual void upload_async(void* dst, const void* host_src, size_t bytes) {
    memory().copy_from_host(dst, host_src, bytes);
  }
  // Waits until everything enqueued so far has run. (memory()'s copies to and from the host wait by themselves.)
  virtual void synchronize() {}
  // Runs `enqueue`, a function that only enqueues work on this backend (no allocation, no host reads or waits, no
  // host value that changes from call to call), for a step identified by `key`. A backend with graphs runs the
  // first calls eagerly, then captures one and replays it while the key and its device allocations stay the same
  // (docs/gpu.md#the-step-as-one-graph); the others call it.
  virtual void run_step(uint64_t key, const std::function<void()>& enqueue) { enqueue(); }
  // How many of the run_step calls so far were replays of a captured graph (0 without graphs): for tests and logs.
  virtual uint64_t replayed_steps() const { return 0; }
  // The kernels the backend chose while running, one line per case in the order chosen ("attention B=8 T=512 H=12
  // D=64: cuDNN fused, bf16"): the trainer prints each once and writes them all to summary.json.
  virtual std::vector<std::string> kernel_choices() const { return {}; }
};

}  // namespace canonlab
