// The (gated) delta rule on the GPU (cuda.h): element_kernels.h, launched on the stream.
#include "engine/cuda/launch.cuh"
#include "engine/ops/delta_rule/cuda.h"
#include "engine/ops/delta_rule/element_kernels.h"
#include "engine/ops/delta_rule/inputs_elements.h"

namespace canonlab::cuda {

void delta_rule_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                        const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                        void* scratch) {
  delta_rule_forward_elements(DeviceLaunch{stream}, scratch, o, states, q, k, v, beta, g, B, Tn, H, K, V, scale, chunk);
}

void delta_rule_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dbeta, float* dg,
                         const float* dout, const float* states, const float* q, const float* k, const float* v,
                         const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                         void* scratch) {
  delta_rule_backward_elements(DeviceLaunch{stream}, scratch, dq, dk, dv, dbeta, dg, dout, states, q, k, v, beta, g, B,
                               Tn, H, K, V, scale, chunk);
}

void delta_inputs_forward(CudaStream stream, float* q, float* k, float* v, float* q_rstd, float* k_rstd, float* beta,
                          float* g, const float* qkv, const float* beta_logit, const float* a_logit,
                          const float* A_log, const float* dt_bias, int N, int H, int K, int Vd, double beta_scale) {
  delta_inputs_forward_elements(DeviceLaunch{stream}, q, k, v, q_rstd, k_rstd, beta, g, qkv, beta_logit, a_logit,
                                A_log, dt_bias, N, H, K, Vd, beta_scale);
}

void delta_beta_backward(CudaStream stream, float* dlogit, const float* dbeta, const float* beta_logit, size_t n,
                         double beta_scale) {
  delta_beta_backward_elements(DeviceLaunch{stream}, dlogit, dbeta, beta_logit, n, beta_scale);
}

void delta_decay_backward(CudaStream stream, float* du, float* dA_log, float* ddt_bias, const float* dg,
                          const float* a_logit, const float* g, const float* A_log, const float* dt_bias, int N, int H,
                          double* scratch) {
  delta_decay_backward_elements(DeviceLaunch{stream}, du, dA_log, ddt_bias, dg, a_logit, g, A_log, dt_bias, N, H,
                                scratch);
}

void delta_inputs_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                           const float* q, const float* k, const float* q_rstd, const float* k_rstd, int N, int H,
                           int K, int Vd) {
  delta_inputs_backward_elements(DeviceLaunch{stream}, dqkv, dq, dk, dv, q, k, q_rstd, k_rstd, N, H, K, Vd);
}

void delta_rule_step(CudaStream stream, float* o_t, float* state, const float* q_t, const float* k_t, const float* v_t,
                     const float* beta_t, const float* g_t, int B, int H, int K, int V, float scale) {
  delta_rule_step_elements(DeviceLaunch{stream}, o_t, state, q_t, k_t, v_t, beta_t, g_t, B, H, K, V, scale);
}

}  // namespace canonlab::cuda
