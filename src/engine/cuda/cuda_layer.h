#pragma once
// The CUDA layer CudaBackend calls, named once. CudaBackendT<Cuda> (cuda_backend.h) calls every kernel launcher and
// runtime function as Cuda::name(...); a layer is a struct that forwards those names to a namespace that declares
// them all with the same signatures:
//   RealCuda (real_cuda.h):    canonlab::cuda, the kernels of engine/ops/*/cuda.cu and engine/cuda/*.cu (a GPU)
//   HostCuda (tests/cuda_host): canonlab::cuda_host, the host stand-in: the same contracts carried out on the host,
//                               so the CPU suite runs CudaBackend's own code (argument order, strides, scratch sizes,
//                               buffer lifetimes, the trainer's device path) on every CI run
//   CountingCuda (counting_cuda.h): launches nothing, answers the scratch-size queries: CudaBackend's own requests,
//                               counted by the resource estimate (`--dry-run` with train.device=cuda)
// The forwarding passes the arguments through unchanged, so a layer cannot reorder them; and each stand-in function
// is checked at compile time to have the type of the CUDA function of its name (tests/cuda_host/host_cuda.h).
#include <utility>

#include "engine/cuda/gemm.h"
#include "engine/cuda/graph.h"
#include "engine/cuda/memory.h"
#include "engine/cuda/runtime.h"
#include "engine/ops/activation/cuda.h"
#include "engine/ops/adamw/cuda.h"
#include "engine/ops/attention/cuda.h"
#include "engine/ops/attention/cudnn.h"
#include "engine/ops/canon_conv/cuda.h"
#include "engine/ops/cross_entropy/cuda.h"
#include "engine/ops/delta_rule/cuda.h"
#include "engine/ops/dynamic_conv/cuda.h"
#include "engine/ops/elementwise/cuda.h"
#include "engine/ops/embedding/cuda.h"
#include "engine/ops/gated_rmsnorm/cuda.h"
#include "engine/ops/gla/cuda.h"
#include "engine/ops/linear/cuda.h"
#include "engine/ops/norm/cuda.h"
#include "engine/ops/rope/cuda.h"
#include "engine/ops/short_conv/cuda.h"
#include "engine/ops/ssd/cuda.h"
#include "engine/ops/token_shift/cuda.h"
#include "engine/ops/repeat_heads/cuda.h"

// Every free function of the layer, X(name) per function, in two lists: the queries (the runtime's and the ops'
// scratch sizes, which return what the caller needs) and the launches (which enqueue work and return nothing). The
// classes (Stream, Event, Gemm, CudaGraph) are the layer's types of the same names.
#define CANONLAB_CUDA_LAYER_QUERIES(X)                                                                                \
  X(device_count) X(no_device_reason) X(device_info) X(select_device) X(synchronize) X(device_memory)                \
  X(pinned_allocate) X(pinned_free)                                                                                  \
  X(norm_backward_scratch_size) X(gated_rmsnorm_backward_scratch_size) X(flash_attention_scratch_size)              \
  X(canon_conv_backward_scratch_size) X(short_conv_bias_backward_scratch_size) X(first_non_finite_scratch_size)     \
  X(ssd_scratch_bytes) X(mamba2_split_backward_scratch_size) X(gla_scratch_bytes) X(delta_rule_scratch_bytes)       \
  X(delta_decay_backward_scratch_size) X(grad_norm_scratch_size) X(cudnn_attention_unsupported)                   \
  X(token_shift_backward_scratch_size)                                                                               \
  X(cudnn_attention_workspace_bytes)

#define CANONLAB_CUDA_LAYER_LAUNCHES(X)                                                                               \
  X(memcpy_async)                                                                                                    \
  /* linear */                                                                                                       \
  X(linear_forward) X(linear_backward) X(linear_forward_bf16) X(linear_backward_bf16) X(bias_backward)              \
  /* norms */                                                                                                        \
  X(rmsnorm_forward) X(rmsnorm_backward) X(layernorm_forward) X(layernorm_backward) X(gated_rmsnorm_forward)        \
  X(gated_rmsnorm_backward)                                                                                          \
  /* attention */                                                                                                    \
  X(rope_forward) X(rope_backward) X(flash_attention_forward) X(flash_attention_backward) X(attention_forward)       \
  X(cudnn_attention_forward) X(cudnn_attention_backward)                                                             \
  /* convolutions */                                                                                                 \
  X(canon_conv_forward) X(canon_conv_backward) X(dynamic_conv_forward) X(dynamic_conv_backward)                      \
  X(short_conv_bias_act_forward) X(short_conv_act_backward) X(short_conv_bias_backward)                              \
  /* activations */                                                                                                  \
  X(gelu_forward) X(gelu_backward) X(silu_forward) X(silu_backward) X(relu2_forward) X(relu2_backward)              \
  X(elu_forward) X(elu_backward) X(swiglu_forward) X(swiglu_backward) X(sign_forward_columns)                        \
  X(sign_ste_backward_columns)                                                                                       \
  /* embedding and loss */                                                                                           \
  X(embedding_forward) X(embedding_backward) X(cross_entropy_forward) X(cross_entropy_backward) X(masked_mean_loss) \
  /* elementwise */                                                                                                  \
  X(fill_zero) X(copy) X(add) X(add_into) X(scale) X(copy_columns) X(shift_add) X(shift_add_backward)                \
  X(convert_to_bf16) X(convert_columns_to_bf16) X(add_positions) X(add_positions_backward) X(round_to_bf16)          \
  X(first_non_finite) X(token_shift_forward) X(token_shift_backward) X(repeat_heads_forward) X(repeat_heads_backward) \
  /* Mamba2 */                                                                                                       \
  X(ssd_forward) X(ssd_backward) X(mamba2_split_forward) X(ssd_decay_rates) X(ssd_decay_rates_backward)              \
  X(mamba2_skip_forward) X(mamba2_split_backward)                                                                    \
  /* GLA */                                                                                                          \
  X(gla_forward) X(gla_backward) X(gla_feature_forward) X(gla_feature_backward) X(gla_gate_forward)                  \
  X(gla_gate_backward)                                                                                               \
  /* (Gated) DeltaNet */                                                                                             \
  X(delta_rule_forward) X(delta_rule_backward) X(delta_inputs_forward) X(delta_beta_backward) X(delta_decay_backward) \
  X(delta_inputs_backward)                                                                                           \
  /* optimizer */                                                                                                    \
  X(grad_sum_squares) X(clip_grad_norm) X(step_guard) X(adamw_update)

#define CANONLAB_CUDA_LAYER_FUNCTIONS(X) CANONLAB_CUDA_LAYER_QUERIES(X) CANONLAB_CUDA_LAYER_LAUNCHES(X)

// A static member function `name` of a layer struct that calls ns::name with the same arguments.
#define CANONLAB_CUDA_FORWARD(ns, name)                    \
  template <class... Args>                                 \
  static decltype(auto) name(Args&&... args) {             \
    return ns::name(std::forward<Args>(args)...);          \
  }

