#pragma once
// Causal softmax attention on the GPU with optional ALiBi and an optional sliding window, in two forms.
//
// Training, flash_attention_*: the (Tn, Tn) scores are never materialised. The forward walks tiles of keys with an
// online softmax and saves one log-sum-exp per query; the backward recomputes the probabilities from it. It is
// deterministic without atomics: dk and dv come from one block per key tile that walks every query tile seeing
// those keys, in order; dq from a second kernel, one block per query tile walking its key tiles in order.
// (FlashAttention-2 instead adds dq across key tiles with atomics; the second pass costs recomputing QKᵀ and dO Vᵀ
// once more.) fp32 on the CUDA cores, head dim up to kFlashMaxHeadDim.
//
// Probes, attention_forward / attention_backward: attention/fast.h's ops with a leading stream, writing the
// (B, H, Tn, Tn) probabilities the attention maps and IPMR read; plain kernels, exact rather than fast.
//
// Sign-STE (±1 q/k), RoPE and the key shift are separate ops applied before these, as on the CPU
// (activation/cuda.h, rope/cuda.h, elementwise/cuda.h).
//
// Shapes as on the CPU: q, k, v: (B, Tn, H, D) token rows of stride ld_qkv (column blocks of a fused (B·Tn, 3C)
// buffer); out, dout: (B, Tn, H, D) contiguous; dq, dk, dv written with row stride ld_dqkv; alibi_slopes: (H) or
// nullptr (device); window: 0 = full causal, w > 0 = query t sees keys t − w < s <= t (w >= Tn is the same as 0).
#include <cstddef>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

constexpr int kFlashMaxHeadDim = 128;

// lse: (B, H, Tn) written, log Σ_s exp(score(t, s)) over the keys query t sees
void flash_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                             float scale);
// Floats of scratch flash_attention_backward needs: rowsum(dout ⊙ out) per query.
inline size_t flash_attention_scratch_size(int B, int Tn, int H) {
  return size_t(B > 0 ? B : 0) * (Tn > 0 ? Tn : 0) * H;
}
// out and lse as the forward wrote them; the same slopes, window and scale
void flash_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                              float scale, float* scratch);

// probs: (B, H, Tn, Tn), zero outside each query's keys (every entry written)
void attention_forward(CudaStream stream, float* out, float* probs, const float* q, const float* k, const float* v,
                       int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D, float scale);
// Floats of scratch attention_backward needs: the (B, H, Tn, Tn) score gradients.
inline size_t attention_backward_scratch_size(int B, int Tn, int H) {
  return size_t(B > 0 ? B : 0) * H * size_t(Tn > 0 ? Tn : 0) * size_t(Tn > 0 ? Tn : 0);
}
void attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                        const float* probs, const float* q, const float* k, const float* v, int ld_qkv, int window,
                        int B, int Tn, int H, int D, float scale, float* scratch);

}  // namespace canonlab::cuda
