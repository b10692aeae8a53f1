#pragma once
// GLA (per-key-channel gates) on the GPU: gla_forward_chunked / gla_backward_chunked's contracts (chunked.h) with a
// leading stream, device pointers and a scratch buffer. The algorithm is element_kernels.h's, one thread per element
// (the same code the CPU suite runs on the host against the references): every element sums in a fixed order, so
// the same inputs give the same bits, with no atomics. fp32 (the gate sums in double), no tensor cores yet.
#include <cstddef>

#include "engine/cuda/types.h"
#include "engine/ops/gla/element_kernels.h"
#include "engine/ops/gla/feature_map.h"

namespace canonlab::cuda {

// Bytes of scratch gla_forward (backward = false) or gla_backward needs; 256-byte aligned regions.
inline size_t gla_scratch_bytes(int B, int Tn, int H, int K, int V, int chunk, bool backward) {
  return gla_element_scratch_bytes<float>(B, Tn, H, K, V, chunk, backward);
}

// o: (B, Tn, H, V) written; states: gla_states_size(B, Tn, H, K, V, chunk) floats, (B, H, nchunks, K, V), written;
// q, k, g: (B, Tn, H, K), g <= 0 (log forget gates); v: (B, Tn, H, V)
void gla_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                 const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk, void* scratch);

// dq, dk, dg: (B, Tn, H, K) and dv: (B, Tn, H, V), written; states from gla_forward with the same chunk.
void gla_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dg, const float* dout,
                  const float* states, const float* q, const float* k, const float* v, const float* g, int B, int Tn,
                  int H, int K, int V, float scale, int chunk, void* scratch);

// One decoding token of B sequences (gla_step's contract, batched): o_t: (B, H, V) written; state: (B, H, K, V)
// updated; q_t, k_t, g_t: (B, H, K); v_t: (B, H, V)
void gla_step(CudaStream stream, float* o_t, float* state, const float* q_t, const float* k_t, const float* v_t,
              const float* g_t, int B, int H, int K, int V, float scale);

// ---- GLA's glue (gates.h's contracts; gates_elements.h) ----

// qkv: (N, 2 Kd + Vd) = [q | k | v] -> q, k: (N, Kd) = φ(q), φ(k); v: (N, Vd)
void gla_feature_forward(CudaStream stream, float* q, float* k, float* v, const float* qkv, int N, int Kd, int Vd,
                         FeatureMap fm);
// dqkv: (N, 2 Kd + Vd) written = [dq ⊙ φ'(q) | dk ⊙ φ'(k) | dv]
void gla_feature_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                          const float* qkv, int N, int Kd, int Vd, FeatureMap fm);
// gk = max(logsigmoid(logit) / normalizer, clamp_min) (clamp_min 0: no clamp), elementwise over n
void gla_gate_forward(CudaStream stream, float* gk, const float* logit, size_t n, double normalizer, double clamp_min);
void gla_gate_backward(CudaStream stream, float* dlogit, const float* dg, const float* logit, size_t n,
                       double normalizer, double clamp_min);

}  // namespace canonlab::cuda
