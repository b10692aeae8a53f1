// Mamba2's SSD scan on the GPU (cuda.h): element_kernels.h, launched on the stream.
#include "engine/cuda/launch.cuh"
#include "engine/ops/ssd/cuda.h"
#include "engine/ops/ssd/element_kernels.h"
#include "engine/ops/ssd/mamba2_io_elements.h"

namespace canonlab::cuda {

void ssd_forward(CudaStream stream, float* y, float* states, const float* x, const float* dt, const float* A,
                 const float* Bm, const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch) {
  ssd_forward_elements(DeviceLaunch{stream}, scratch, y, states, x, dt, A, Bm, Cm, B, Tn, H, P, G, N, chunk);
}

void ssd_backward(CudaStream stream, float* dx, float* ddt, float* dA, float* dB, float* dC, const float* dy,
                  const float* states, const float* x, const float* dt, const float* A, const float* Bm,
                  const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch) {
  ssd_backward_elements(DeviceLaunch{stream}, scratch, dx, ddt, dA, dB, dC, dy, states, x, dt, A, Bm, Cm, B, Tn, H, P,
                        G, N, chunk);
}

void mamba2_split_forward(CudaStream stream, float* x, float* Bm, float* Cm, float* z, float* dt, const float* xbc,
                          int ld_xbc, const float* mixed, const float* dt_bias, int N, int Dp, int Di, int GN, int CD,
                          int H) {
  mamba2_split_forward_elements(DeviceLaunch{stream}, x, Bm, Cm, z, dt, xbc, ld_xbc, mixed, dt_bias, N, Dp, Di, GN, CD,
                                H);
}

void ssd_decay_rates(CudaStream stream, float* A, const float* A_log, int H) {
  ssd_decay_rates_elements(DeviceLaunch{stream}, A, A_log, H);
}

void ssd_decay_rates_backward(CudaStream stream, float* dA_log, const float* dA, const float* A, int H) {
  ssd_decay_rates_backward_elements(DeviceLaunch{stream}, dA_log, dA, A, H);
}

void mamba2_skip_forward(CudaStream stream, float* y, const float* D, const float* x, int N, int H, int P) {
  mamba2_skip_forward_elements(DeviceLaunch{stream}, y, D, x, N, H, P);
}

void mamba2_split_backward(CudaStream stream, float* dxbc, int ld_dxbc, float* dmixed, float* ddt_bias, float* dD,
                           const float* dx, const float* dy, const float* dB, const float* dC, const float* dz,
                           const float* ddt, const float* mixed, const float* dt_bias, const float* D, const float* x,
                           int N, int Dp, int Di, int GN, int CD, int H, int P, double* scratch) {
  mamba2_split_backward_elements(DeviceLaunch{stream}, dxbc, ld_dxbc, dmixed, ddt_bias, dD, dx, dy, dB, dC, dz, ddt,
                                 mixed, dt_bias, D, x, N, Dp, Di, GN, CD, H, P, scratch);
}

void ssd_step(CudaStream stream, float* y_t, float* state, const float* x_t, const float* dt_t, const float* A,
              const float* B_t, const float* C_t, int B, int H, int P, int G, int N) {
  ssd_step_elements(DeviceLaunch{stream}, y_t, state, x_t, dt_t, A, B_t, C_t, B, H, P, G, N);
}

}  // namespace canonlab::cuda
