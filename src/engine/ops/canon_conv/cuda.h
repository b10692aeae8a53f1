#pragma once
// The Canon layer's causal convolution on the GPU.
//
// canon_conv_forward / canon_conv_backward are fast.h's ops (any groups G) with a leading stream, device
// pointers and, for the backward, scratch. canon_forward / canon_backward are the whole depthwise Canon branch of
// nn/canon.h fused into one kernel each:
//     out = [in +] norm(act(conv(in)))            act: none | silu | elu, norm: none | rmsnorm | layernorm
// so the conv output, the activation and the normalised row never make a round trip through memory between
// stages. The forward saves pre_act (the conv output) and the norm's statistics; the backward recomputes the
// activation from pre_act.
//
// Deterministic: each block owns a (sequence, 64-token) tile; parameter gradients are per-tile partial sums in
// double, reduced over tiles in tile order by a second kernel and accumulated (+=) into dweight, dnorm_w,
// dnorm_b. No atomics. The tiling depends on the shapes alone.
#include <cstddef>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

enum class CanonActivation { none, silu, elu };
enum class CanonNorm { none, rmsnorm, layernorm };

// out, in: (B, Tn, C); weight: (C, C/G, K) (PyTorch Conv1d layout), causal:
// out[t, c] = Σ_{j, i} weight[c, j, i] · in[t − (K−1) + i, g·(C/G) + j], g = c / (C/G), zero for negative times
void canon_conv_forward(CudaStream stream, float* out, const float* in, const float* weight, int B, int Tn, int C,
                        int K, int G);
// Doubles of scratch canon_conv_backward needs (depthwise G == C uses the fused kernel's tiles; other G none).
// din: (B, Tn, C) written; dweight: (C, C/G, K) accumulated
void canon_conv_backward(CudaStream stream, float* din, float* dweight, const float* dout, const float* in,
                         const float* weight, int B, int Tn, int C, int K, int G, double* scratch);

// The fused depthwise branch, K <= 1024 (model.canon.kernel_size's limit; above it an Error). weight: (C, 1, K); norm_w, norm_b: (C) or nullptr (no scale / no bias);
// pre_act: (B, Tn, C) written, the conv output; mean (layernorm only) and rstd: (B·Tn) written when norm != none
// (may be null otherwise). eps as the Norm module's.
void canon_forward(CudaStream stream, float* out, float* pre_act, float* mean, float* rstd, const float* in,
                   const float* weight, const float* norm_w, const float* norm_b, int B, int Tn, int C, int K,
                   CanonActivation act, CanonNorm norm, float eps, bool residual);

// The fused kernels' tiles: (sequence, kCanonTileRows tokens), a function of the shapes alone.
inline constexpr int kCanonTileRows = 64;
struct CanonTiles {
  int per_seq, count;
};
inline CanonTiles canon_tiles(int B, int Tn) {
  const int per = (Tn + kCanonTileRows - 1) / kCanonTileRows;
  return {per, B * per};
}
// Doubles of scratch canon_backward needs: per-tile partials of the parameter gradients and the per-token norm terms
inline size_t canon_backward_scratch_size(int B, int Tn, int C, int K) {
  if (B <= 0 || Tn <= 0 || C <= 0) return 0;
  const size_t partial = size_t(canon_tiles(B, Tn).count) * C * (K + 2);
  const size_t terms_floats = size_t(2) * B * Tn;
  return partial + (terms_floats + 1) / 2;
}
inline size_t canon_conv_backward_scratch_size(int B, int Tn, int C, int K, int G) {
  return G == C ? canon_backward_scratch_size(B, Tn, C, K) : 0;
}
// din: (B, Tn, C) written (dout added when residual); dweight (C, 1, K), dnorm_w (C) and dnorm_b (C) accumulated,
// each skipped when null; dout: (B, Tn, C); the rest as saved by canon_forward.
void canon_backward(CudaStream stream, float* din, float* dweight, float* dnorm_w, float* dnorm_b, const float* dout,
                    const float* in, const float* weight, const float* pre_act, const float* norm_w, const float* mean,
                    const float* rstd, int B, int Tn, int C, int K, CanonActivation act, CanonNorm norm, bool residual,
                    double* scratch);

}  // namespace canonlab::cuda
