#pragma once
// CountingCuda: the CUDA layer of cuda_layer.h that launches nothing. CudaBackendT<CountingCuda> over a CountingMemory
// (engine/backend/counting_memory.h) is the resource estimate's GPU backend: the model's real construction, forward,
// backward and update run their CudaBackend code, which sizes its workspace with the kernels' own scratch functions
// (plain C++ of the ops' cuda.h), and every device allocation is counted; no GPU is needed, none is touched.
#include <string>

#include "engine/cuda/cuda_layer.h"
#include "engine/error.h"

namespace canonlab {

struct CountingCuda {
  // The launches: nothing happens.
#define CANONLAB_COUNTING_CUDA_LAUNCH(name) \
  template <class... Args>                  \
  static void name(Args&&...) {}
  CANONLAB_CUDA_LAYER_LAUNCHES(CANONLAB_COUNTING_CUDA_LAUNCH)
#undef CANONLAB_COUNTING_CUDA_LAUNCH

  // The scratch sizes: the kernels' own.
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, norm_backward_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, gated_rmsnorm_backward_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, flash_attention_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, canon_conv_backward_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, short_conv_bias_backward_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, first_non_finite_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, ssd_scratch_bytes)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, mamba2_split_backward_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, gla_scratch_bytes)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, delta_rule_scratch_bytes)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, delta_decay_backward_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, grad_norm_scratch_size)
  CANONLAB_CUDA_FORWARD(::canonlab::cuda, token_shift_backward_scratch_size)
  // cuDNN's attention: what the shape alone refuses, and the workspace's bound from the shape (no device to ask)
  static std::string cudnn_attention_unsupported(int B, int Tn, int H, int D, bool, int) {
    return cuda::cudnn_attention_shape_unsupported(B, Tn, H, D);
  }
  static size_t cudnn_attention_workspace_bytes(int B, int Tn, int H, int D, bool, int, bool backward) {
    return cuda::cudnn_attention_workspace_bound(B, Tn, H, D, backward);
  }

  // The runtime: one device that is never used; its memory is always the counting memory of CudaBackendOptions.
  static int device_count() { return 1; }
  static std::string no_device_reason() { return ""; }
  static void select_device(int, const std::string&) {}
  static void synchronize(cuda::CudaStream) {}
  static DeviceMemory& device_memory() {
    throw Error("CudaBackendT<CountingCuda> needs CudaBackendOptions::memory (a CountingMemory)");
  }
  static void* pinned_allocate(size_t) { throw Error("CountingCuda: nothing is uploaded while counting"); }
  static void pinned_free(void*) noexcept {}

  struct Stream {
    cuda::CudaStream get() const { return nullptr; }
  };
  struct Event {
    void record(cuda::CudaStream) {}
    void synchronize() const {}
  };
  struct Gemm {
    explicit Gemm(cuda::CudaStream) {}
  };
  struct Graph {
    void capture(cuda::CudaStream, const std::function<void()>& step) { step(); }
    void launch(cuda::CudaStream) const {}
    bool ready() const { return false; }
  };
};

}  // namespace canonlab
