#pragma once
// The resource estimate's backends (train/resource_estimate.cpp): a model built on one and stepped once allocates
// exactly what it would on its device, from a CountingMemory that counts it, and nothing else happens.
//   CountingCpuBackend: every op does nothing; every size a module asks for is the CPU backend's own answer (its
//     kernels' state and scratch sizes at the run's thread count).
//   CudaBackendT<CountingCuda> (engine/cuda/counting_cuda.h): CudaBackend's own code, launching nothing.
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/counting_memory.h"
#include "engine/cuda/cuda_backend_options.h"
#include "engine/device.h"
#include "engine/ops/attention/fast.h"
#include "engine/ops/canon_conv/fused.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/ssd/naive.h"

namespace canonlab {

class CountingCpuBackend final : public Backend<float> {
 public:
  CountingCpuBackend(CountingMemory& memory, Precision precision, int threads)
      : memory_(memory), precision_(precision), threads_(threads) {}

  DeviceMemory& memory() override { return memory_; }
  Precision precision() const override { return precision_; }
  std::string name() const override { return "cpu (counting)"; }
  bool supports(OpGroup) const override { return true; }
  bool counts_only() const override { return true; }

  // ---- the CPU backend's sizes and choices ----
  size_t attention_state_size(int B, int Tn, int H) const override { return canonlab::attention_state_size(B, Tn, H); }
  size_t attention_scratch_size(int Tn) const override { return canonlab::attention_scratch_size(Tn, threads_); }
  bool has_fused_canon() const override { return true; }
  size_t canon_fused_scratch_size(int B, int Tn, int C, int K, int G, CanonEpilogue ep) const override {
    return canonlab::canon_fused_scratch_size(B, Tn, C, K, G, ep);
  }
  bool has_lowrank_dynamic_conv() const override { return true; }
  size_t ssd_states_size(int B, int Tn, int H, int P, int N, int chunk) const override {
    return canonlab::ssd_states_size(B, Tn, H, P, N, chunk);
  }
  size_t gla_states_size(int B, int Tn, int H, int K, int V, int chunk) const override {
    return canonlab::gla_states_size(B, Tn, H, K, V, chunk);
  }
  size_t delta_rule_states_size(int B, int Tn, int H, int K, int V, int chunk) const override {
    return canonlab::delta_rule_states_size(B, Tn, H, K, V, chunk);
  }
  size_t first_non_finite(const float*, size_t n) override { return n; }

  // ---- every op: nothing ----
  void linear_forward(float*, int, const float*, int, const float*, const float*, int, int, int) override {}
  void linear_backward(float*, int, float*, float*, const float*, int, const float*, int, const float*, int, int,
                       int) override {}
  void linear_forward_int8(float*, int, const float*, int, const int8_t*, const float*, const float*, int, int,
                           int) override {}
  void round_to_bf16(float*, const float*, size_t) override {}
  void rmsnorm_forward(float*, float*, const float*, const float*, int, int, float) override {}
  void rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*, int, int) override {}
  void layernorm_forward(float*, float*, float*, const float*, const float*, const float*, int, int, float) override {}
  void layernorm_backward(float*, float*, float*, const float*, const float*, const float*, const float*, const float*,
                          int, int) override {}
  void gated_rmsnorm_forward(float*, float*, const float*, const float*, const float*, int, int, int, int, float,
                             GateOrder) override {}
  void gated_rmsnorm_backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                              const float*, int, int, int, int, GateOrder) override {}
  void rope_forward(float*, int, int, int, int, int, int, double) override {}
  void rope_backward(float*, int, int, int, int, int, int, double) override {}
  void attention_forward(float*, float*, float*, const float*, const float*, const float*, int, const float*, int, int,
                         int, int, int, float, float*) override {}
  void attention_backward(float*, float*, float*, int, const float*, const float*, const float*, const float*,
                          const float*, const float*, int, const float*, int, int, int, int, int, float,
                          float*) override {}
  void canon_conv_forward(float*, const float*, const float*, int, int, int, int, int) override {}
  void canon_conv_backward(float*, float*, const float*, const float*, const float*, int, int, int, int, int) override {}
  void canon_fused_forward(float*, float*, float*, float*, const float*, const float*, const float*, const float*, int,
                           int, int, int, int, CanonEpilogue, float) override {}
  void canon_fused_backward(float*, float*, float*, float*, float*, const float*, const float*, const float*,
                            const float*, const float*, const float*, const float*, int, int, int, int, int,
                            CanonEpilogue) override {}
  void dynamic_conv_forward(float*, const float*, const float*, int, int, int, int) override {}
  void dynamic_conv_backward(float*, float*, const float*, const float*, const float*, int, int, int, int) override {}
  void dynamic_conv_lowrank_forward(float*, const float*, const float*, const float*, int, int, int, int,
                                    int) override {}
  void dynamic_conv_lowrank_backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                                     int, int, int, int, int) override {}
  void short_conv_bias_act_forward(float*, int, float*, const float*, int, int, bool) override {}
  void short_conv_act_backward(float*, const float*, int, const float*, int, int, bool) override {}
  void short_conv_bias_backward(float*, const float*, int, int) override {}
  void gelu_forward(float*, const float*, size_t) override {}
  void gelu_backward(float*, const float*, const float*, size_t) override {}
  void silu_forward(float*, const float*, size_t) override {}
  void silu_backward(float*, const float*, const float*, size_t) override {}
  void relu2_forward(float*, const float*, size_t) override {}
  void relu2_backward(float*, const float*, const float*, size_t) override {}
  void elu_forward(float*, const float*, size_t) override {}
  void elu_backward(float*, const float*, const float*, size_t) override {}
  void swiglu_forward(float*, const float*, int, int) override {}
  void swiglu_backward(float*, const float*, const float*, int, int) override {}
  void sign_forward_rows(float*, int, const float*, int, int, int) override {}
  void sign_ste_backward_rows(float*, int, const float*, int, const float*, int, int, int, bool) override {}
  void embedding_forward(float*, const int*, const float*, int, int, int) override {}
  void embedding_backward(float*, const float*, const int*, int, int, int) override {}
  void masked_cross_entropy(float*, float*, float*, const float*, const int*, const float*, int, int, const double*,
                            double*) override {}
  void add(float*, const float*, const float*, size_t) override {}
  void add_into(float*, const float*, size_t) override {}
  void copy(float*, const float*, size_t) override {}
  void fill_zero(float*, size_t) override {}
  void copy_rows(float*, int, const float*, int, int, int) override {}
  void shift_add_forward(float*, const float*, int, int, int, int) override {}
  void shift_add_backward(float*, const float*, int, int, int, int) override {}
  void add_positions(float*, const float*, int, int, int) override {}
  void add_positions_backward(float*, const float*, int, int, int) override {}
  void token_shift_forward(float*, int, const float*, int, const float*, const TokenShift&, int, int, int, int) override {}
  void token_shift_backward(float*, int, float*, const float*, int, const float*, int, const float*, const TokenShift&,
                            int, int, int, int) override {}
  void repeat_heads_forward(float*, int, const float*, int, int, int, int, int) override {}
  void repeat_heads_backward(float*, int, const float*, int, int, int, int, int) override {}
  void ssd_forward_chunked(float*, float*, const float*, const float*, const float*, const float*, const float*, int,
                           int, int, int, int, int, int) override {}
  void ssd_backward_chunked(float*, float*, float*, float*, float*, const float*, const float*, const float*,
                            const float*, const float*, const float*, const float*, int, int, int, int, int, int,
                            int) override {}
  void mamba2_split_forward(float*, float*, float*, float*, float*, const float*, int, const float*, const float*, int,
                            int, int, int, int, int) override {}
  void ssd_decay_rates(float*, const float*, int) override {}
  void ssd_decay_rates_backward(float*, const float*, const float*, int) override {}
  void mamba2_skip_forward(float*, const float*, const float*, int, int, int) override {}
  void mamba2_split_backward(float*, int, float*, float*, float*, const float*, const float*, const float*,
                             const float*, const float*, const float*, const float*, const float*, const float*,
                             const float*, int, int, int, int, int, int, int) override {}
  void gla_forward_chunked(float*, float*, const float*, const float*, const float*, const float*, int, int, int, int,
                           int, float, int) override {}
  void gla_backward_chunked(float*, float*, float*, float*, const float*, const float*, const float*, const float*,
                            const float*, const float*, int, int, int, int, int, float, int) override {}
  void gla_feature_forward(float*, float*, float*, const float*, int, int, int, FeatureMap) override {}
  void gla_feature_backward(float*, const float*, const float*, const float*, const float*, int, int, int,
                            FeatureMap) override {}
  void gla_gate_forward(float*, const float*, size_t, double, double) override {}
  void gla_gate_backward(float*, const float*, const float*, size_t, double, double) override {}
  void delta_rule_forward_chunked(float*, float*, const float*, const float*, const float*, const float*, const float*,
                                  int, int, int, int, int, float, int) override {}
  void delta_rule_backward_chunked(float*, float*, float*, float*, float*, const float*, const float*, const float*,
                                   const float*, const float*, const float*, const float*, int, int, int, int, int,
                                   float, int) override {}
  void delta_inputs_forward(float*, float*, float*, float*, float*, float*, float*, const float*, const float*,
                            const float*, const float*, const float*, int, int, int, int, double) override {}
  void delta_beta_backward(float*, const float*, const float*, size_t, double) override {}
  void delta_decay_backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                            const float*, int, int) override {}
  void delta_inputs_backward(float*, const float*, const float*, const float*, const float*, const float*,
                             const float*, const float*, int, int, int, int) override {}
  void grad_sum_squares(const float*, size_t, double*) override {}
  void clip_grad_norm(float*, size_t, const double*, double) override {}
  void scale(float*, size_t, double) override {}
  void step_guard(int32_t*, const int32_t*, const double*, int) override {}
  void adamw_update(float*, const float*, float*, float*, const uint8_t*, size_t, const AdamWCoefficients*,
                    const int32_t*) override {}

 private:
  CountingMemory& memory_;
  Precision precision_;
  int threads_;
};

// The counting backend of train.device (cpu, cuda, cuda:N) and train.precision over `memory`; threads: the CPU's;
// attention: train.attention_kernel (the GPU's).
std::shared_ptr<Backend<float>> make_counting_backend(const std::string& device, Precision precision,
                                                      CountingMemory& memory, int threads,
                                                      AttentionKernel attention = AttentionKernel::automatic);

}  // namespace canonlab
