// The gated RMSNorm on the GPU (cuda.h): element_kernels.h, launched on the stream.
#include "engine/cuda/launch.cuh"
#include "engine/ops/gated_rmsnorm/cuda.h"
#include "engine/ops/gated_rmsnorm/element_kernels.h"

namespace canonlab::cuda {

void gated_rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* z, const float* w,
                           int N, int G, int Cg, int Cw, float eps, GateOrder order) {
  gated_rmsnorm_forward_elements(DeviceLaunch{stream}, y, rstd, x, z, w, N, G, Cg, Cw, eps, order);
}

void gated_rmsnorm_backward(CudaStream stream, float* dx, float* dz, float* dw, const float* dy, const float* x,
                            const float* z, const float* w, const float* rstd, int N, int G, int Cg, int Cw,
                            GateOrder order, double* scratch) {
  gated_rmsnorm_backward_elements(DeviceLaunch{stream}, dx, dz, dw, dy, x, z, w, rstd, N, G, Cg, Cw, order, scratch);
}

}  // namespace canonlab::cuda
