#pragma once
// The (gated) delta rule on the GPU: delta_rule_forward_chunked / delta_rule_backward_chunked's contracts
// (chunked.h) with a leading stream, device pointers and a scratch buffer. The algorithm is element_kernels.h's WY
// form, one thread per element (the same code the CPU suite runs on the host against the references): the
// triangular inverse one column per element, the chunk-to-chunk passing one state column per element, every
// element summing in a fixed order, so the same inputs give the same bits, with no atomics. fp32 (the decay sums
// in double), no tensor cores yet.
#include <cstddef>

#include "engine/cuda/types.h"
#include "engine/ops/delta_rule/element_kernels.h"
#include "engine/ops/element_kernels.h"

namespace canonlab::cuda {

// Bytes of scratch delta_rule_forward (backward = false) or delta_rule_backward needs; 256-byte aligned regions.
inline size_t delta_rule_scratch_bytes(int B, int Tn, int H, int K, int V, int chunk, bool backward) {
  return delta_rule_element_scratch_bytes<float>(B, Tn, H, K, V, chunk, backward);
}

// o: (B, Tn, H, V) written; states: delta_rule_states_size(B, Tn, H, K, V, chunk) floats, (B, H, nchunks, K, V),
// written; q, k: (B, Tn, H, K) (L2-normalised by the caller); v: (B, Tn, H, V); beta: (B, Tn, H); g: (B, Tn, H) log
// decay (<= 0), or nullptr (DeltaNet)
void delta_rule_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                        const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                        void* scratch);

// dq, dk: (B, Tn, H, K), dv: (B, Tn, H, V), dbeta: (B, Tn, H), written; dg: (B, Tn, H) written, null exactly when
// g is; states from delta_rule_forward with the same chunk.
void delta_rule_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dbeta, float* dg,
                         const float* dout, const float* states, const float* q, const float* k, const float* v,
                         const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                         void* scratch);

// One decoding token of B sequences (delta_rule_step's contract, batched): o_t: (B, H, V) written; state:
// (B, H, K, V) updated; q_t, k_t: (B, H, K); v_t: (B, H, V); beta_t: (B, H); g_t: (B, H) or nullptr (DeltaNet)
void delta_rule_step(CudaStream stream, float* o_t, float* state, const float* q_t, const float* k_t, const float* v_t,
                     const float* beta_t, const float* g_t, int B, int H, int K, int V, float scale);

// ---- (Gated) DeltaNet's glue (inputs.h's contracts; inputs_elements.h) ----

// qkv: (N, 2 H K + Vd); writes q, k: (N, H K) l2-normalised per head, q_rstd, k_rstd: (N, H), v: (N, Vd),
// beta: (N, H) = beta_scale σ(beta_logit), and g: (N, H) = −exp(A_log) softplus(a_logit + dt_bias) when a_logit is
// non-null
void delta_inputs_forward(CudaStream stream, float* q, float* k, float* v, float* q_rstd, float* k_rstd, float* beta,
                          float* g, const float* qkv, const float* beta_logit, const float* a_logit,
                          const float* A_log, const float* dt_bias, int N, int H, int K, int Vd, double beta_scale);
void delta_beta_backward(CudaStream stream, float* dlogit, const float* dbeta, const float* beta_logit, size_t n,
                         double beta_scale);
// Doubles of scratch delta_decay_backward needs.
inline size_t delta_decay_backward_scratch_size(int H) { return size_t(kRowBlocks) * H; }
// du: (N, H) written; dA_log, ddt_bias: (H) accumulated
void delta_decay_backward(CudaStream stream, float* du, float* dA_log, float* ddt_bias, const float* dg,
                          const float* a_logit, const float* g, const float* A_log, const float* dt_bias, int N, int H,
                          double* scratch);
// dqkv: (N, 2 H K + Vd) written
void delta_inputs_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                           const float* q, const float* k, const float* q_rstd, const float* k_rstd, int N, int H,
                           int K, int Vd);

}  // namespace canonlab::cuda
