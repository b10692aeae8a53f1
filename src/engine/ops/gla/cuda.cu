// GLA on the GPU (cuda.h): element_kernels.h, launched on the stream.
#include "engine/cuda/launch.cuh"
#include "engine/ops/gla/cuda.h"
#include "engine/ops/gla/element_kernels.h"
#include "engine/ops/gla/gates_elements.h"

namespace canonlab::cuda {

void gla_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                 const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk, void* scratch) {
  gla_forward_elements(DeviceLaunch{stream}, scratch, o, states, q, k, v, g, B, Tn, H, K, V, scale, chunk);
}

void gla_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dg, const float* dout,
                  const float* states, const float* q, const float* k, const float* v, const float* g, int B, int Tn,
                  int H, int K, int V, float scale, int chunk, void* scratch) {
  gla_backward_elements(DeviceLaunch{stream}, scratch, dq, dk, dv, dg, dout, states, q, k, v, g, B, Tn, H, K, V,
                        scale, chunk);
}

void gla_feature_forward(CudaStream stream, float* q, float* k, float* v, const float* qkv, int N, int Kd, int Vd,
                         FeatureMap fm) {
  gla_feature_forward_elements(DeviceLaunch{stream}, q, k, v, qkv, N, Kd, Vd, fm);
}

void gla_feature_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                          const float* qkv, int N, int Kd, int Vd, FeatureMap fm) {
  gla_feature_backward_elements(DeviceLaunch{stream}, dqkv, dq, dk, dv, qkv, N, Kd, Vd, fm);
}

void gla_gate_forward(CudaStream stream, float* gk, const float* logit, size_t n, double normalizer, double clamp_min) {
  gla_gate_forward_elements(DeviceLaunch{stream}, gk, logit, n, normalizer, clamp_min);
}

void gla_gate_backward(CudaStream stream, float* dlogit, const float* dg, const float* logit, size_t n,
                       double normalizer, double clamp_min) {
  gla_gate_backward_elements(DeviceLaunch{stream}, dlogit, dg, logit, n, normalizer, clamp_min);
}

void gla_step(CudaStream stream, float* o_t, float* state, const float* q_t, const float* k_t, const float* v_t,
              const float* g_t, int B, int H, int K, int V, float scale) {
  gla_step_elements(DeviceLaunch{stream}, o_t, state, q_t, k_t, v_t, g_t, B, H, K, V, scale);
}

}  // namespace canonlab::cuda
