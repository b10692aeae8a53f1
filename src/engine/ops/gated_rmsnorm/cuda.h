#pragma once
// The gated RMSNorm of the linear mixers on the GPU: gated_rmsnorm.h's contracts with a leading stream and device
// pointers. The algorithm is element_kernels.h's (checked on the host against gated_rmsnorm.h): one thread per
// (row, group), its sums in double in channel order; dw through 64 fixed row blocks summed in order, so the bits
// repeat.
#include <cstddef>

#include "engine/cuda/types.h"
#include "engine/ops/element_kernels.h"
#include "engine/ops/gated_rmsnorm/gate_order.h"

namespace canonlab::cuda {

// x, z, y: (N, G·Cg); rstd: (N, G) written; w: (Cw), indexed by channel mod Cw; z may be null (no gate)
void gated_rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* z, const float* w,
                           int N, int G, int Cg, int Cw, float eps, GateOrder order);
// Doubles of scratch gated_rmsnorm_backward needs.
inline size_t gated_rmsnorm_backward_scratch_size(int Cw) { return size_t(kRowBlocks) * Cw; }
// dx, dz written (dz skipped when z is null); dw: (Cw) accumulated
void gated_rmsnorm_backward(CudaStream stream, float* dx, float* dz, float* dw, const float* dy, const float* x,
                            const float* z, const float* w, const float* rstd, int N, int G, int Cg, int Cw,
                            GateOrder order, double* scratch);

}  // namespace canonlab::cuda
