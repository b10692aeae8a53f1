// The short convolution's bias and activation stage on the GPU (cuda.h): element_kernels.h, launched on the stream.
#include "engine/cuda/launch.cuh"
#include "engine/ops/short_conv/cuda.h"
#include "engine/ops/short_conv/element_kernels.h"

namespace canonlab::cuda {

void short_conv_bias_act_forward(CudaStream stream, float* y, int ldy, float* pre, const float* bias, int N, int C,
                                 bool silu) {
  short_conv_bias_act_forward_elements(DeviceLaunch{stream}, y, ldy, pre, bias, N, C, silu);
}

void short_conv_act_backward(CudaStream stream, float* dpre, const float* dy, int lddy, const float* pre, int N, int C,
                             bool silu) {
  short_conv_act_backward_elements(DeviceLaunch{stream}, dpre, dy, lddy, pre, N, C, silu);
}

void short_conv_bias_backward(CudaStream stream, float* db, const float* dpre, int N, int C, double* scratch) {
  short_conv_bias_backward_elements(DeviceLaunch{stream}, db, dpre, N, C, scratch);
}

}  // namespace canonlab::cuda
