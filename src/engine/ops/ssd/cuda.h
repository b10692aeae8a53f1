#pragma once
// Mamba2's SSD scan on the GPU: ssd_forward_chunked / ssd_backward_chunked's contracts (chunked.h) with a leading
// stream, device pointers and a scratch buffer. The algorithm is element_kernels.h's, one thread per element (the
// same code the CPU suite runs on the host against the references): every element sums in a fixed order and dA is reduced by one thread per head over (batch, time) in order, so the same
// inputs give the same bits, with no atomics. fp32 throughout (cs and the gate sums in double), no tensor cores yet.
#include <cstddef>

#include "engine/cuda/types.h"
#include "engine/ops/ssd/element_kernels.h"
#include "engine/ops/element_kernels.h"

namespace canonlab::cuda {

// Bytes of scratch ssd_forward (backward = false) or ssd_backward needs; 256-byte aligned regions.
inline size_t ssd_scratch_bytes(int B, int Tn, int H, int P, int G, int N, int chunk, bool backward) {
  return ssd_element_scratch_bytes<float>(B, Tn, H, P, G, N, chunk, backward);
}

// y, x: (B, Tn, H, P); dt: (B, Tn, H) (> 0); A: (H) (< 0); Bm, Cm: (B, Tn, G, N), head h uses group h / (H/G);
// states: ssd_states_size(B, Tn, H, P, N, chunk) floats, the state before each chunk (written, read by backward).
void ssd_forward(CudaStream stream, float* y, float* states, const float* x, const float* dt, const float* A,
                 const float* Bm, const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch);

// dx: (B, Tn, H, P); ddt: (B, Tn, H); dA: (H) summed over batch and time; dB, dC: (B, Tn, G, N) summed over each
// group's heads; all written. states from ssd_forward with the same chunk.
void ssd_backward(CudaStream stream, float* dx, float* ddt, float* dA, float* dB, float* dC, const float* dy,
                  const float* states, const float* x, const float* dt, const float* A, const float* Bm,
                  const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch);

// One decoding token of B sequences (ssd_step's contract, batched): y_t: (B, H, P) written; state: (B, H, P, N) updated;
// x_t: (B, H, P); dt_t: (B, H); A: (H); B_t, C_t: (B, G, N)
void ssd_step(CudaStream stream, float* y_t, float* state, const float* x_t, const float* dt_t, const float* A,
              const float* B_t, const float* C_t, int B, int H, int P, int G, int N);

// ---- Mamba2's glue (mamba2_io.h's contracts; mamba2_io_elements.h) ----

// xbc: (N, CD) rows of stride ld_xbc = [x | B | C]; mixed: (N, Dp) = [z | xBC | dt logits]; writes x, z: (N, Di),
// Bm, Cm: (N, GN), dt: (N, H) = softplus(dt logit + dt_bias)
void mamba2_split_forward(CudaStream stream, float* x, float* Bm, float* Cm, float* z, float* dt, const float* xbc,
                          int ld_xbc, const float* mixed, const float* dt_bias, int N, int Dp, int Di, int GN, int CD,
                          int H);
// A = −exp(A_log): (H)
void ssd_decay_rates(CudaStream stream, float* A, const float* A_log, int H);
// dA_log += dA ⊙ A
void ssd_decay_rates_backward(CudaStream stream, float* dA_log, const float* dA, const float* A, int H);
// y[n, h, :] += D[h] x[n, h, :]; y, x: (N, H·P)
void mamba2_skip_forward(CudaStream stream, float* y, const float* D, const float* x, int N, int H, int P);
// Doubles of scratch mamba2_split_backward needs.
inline size_t mamba2_split_backward_scratch_size(int H) { return size_t(kRowBlocks) * H; }
// dxbc rows = [dx + D·dy | dB | dC]; dmixed's z and dt columns; ddt_bias, dD: (H) accumulated
void mamba2_split_backward(CudaStream stream, float* dxbc, int ld_dxbc, float* dmixed, float* ddt_bias, float* dD,
                           const float* dx, const float* dy, const float* dB, const float* dC, const float* dz,
                           const float* ddt, const float* mixed, const float* dt_bias, const float* D, const float* x,
                           int N, int Dp, int Di, int GN, int CD, int H, int P, double* scratch);

}  // namespace canonlab::cuda
