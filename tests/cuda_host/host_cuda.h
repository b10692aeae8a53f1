#pragma once
// The host stand-in of the CUDA layer (engine/cuda/cuda_layer.h): every function CudaBackend calls, with the
// signature of canonlab::cuda's (checked below at compile time), its contract carried out on the host. So the CPU
// suite runs CudaBackendT<HostCuda>, CudaBackend's own code, on every CI run (docs/gpu.md#the-host-stand-in).
//
// Stricter than a GPU where that is cheap: device memory is an address range the host cannot dereference (PROT_NONE)
// with host storage behind each allocation, so host code that reads a device pointer faults; every pointer an op is
// given is checked against the live allocation it points into, for the extent the contract says; allocations and
// op scratch start as NaN; a guard after each allocation is checked when it is freed; a freed address is never handed
// out again; and, while a graph is being captured on a thread, that thread's synchronous calls (allocation, copies,
// fills, synchronize) are Errors, as in CUDA's capture mode. Work on a stream runs at once, in order; during a capture
// it is recorded instead and runs when the graph is launched.
//
// The Transformer family's ops run the CPU kernels under cuda.h's conventions (the log-sum-exp attention state, V for
// the embedding, masked means, bf16 inputs converted); the linear families' and the small elementwise ops run their
// element kernels through HostLaunch, the code the GPU runs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda/cuda_layer.h"

namespace canonlab::cuda_host {

using ::canonlab::cuda::Bf16;
using ::canonlab::cuda::CopyKind;
using ::canonlab::cuda::CudaStream;
using ::canonlab::cuda::DeviceInfo;
// The scratch sizes are plain C++ of the kernels' own headers: the stand-in asks the same functions.
using ::canonlab::cuda::norm_backward_scratch_size;
using ::canonlab::cuda::gated_rmsnorm_backward_scratch_size;
using ::canonlab::cuda::flash_attention_scratch_size;
using ::canonlab::cuda::canon_conv_backward_scratch_size;
using ::canonlab::cuda::short_conv_bias_backward_scratch_size;
using ::canonlab::cuda::token_shift_backward_scratch_size;
using ::canonlab::cuda::first_non_finite_scratch_size;
using ::canonlab::cuda::ssd_scratch_bytes;
using ::canonlab::cuda::mamba2_split_backward_scratch_size;
using ::canonlab::cuda::gla_scratch_bytes;
using ::canonlab::cuda::delta_rule_scratch_bytes;
using ::canonlab::cuda::delta_decay_backward_scratch_size;
using ::canonlab::cuda::grad_norm_scratch_size;

// An owned stream: work enqueued on it runs at once on the calling thread, or is recorded while it is captured.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CudaStream get() const { return stream_; }

 private:
  CudaStream stream_ = nullptr;
};

// Work runs when it is enqueued, so a recorded event has always been reached; waiting on it during a capture is the
// same Error as on a GPU.
class Event {
 public:
  void record(CudaStream stream);
  void synchronize() const;
};

// cuda::Gemm's role: the stream and the ones vector of bias gradients, which grows on demand (an Error while
// capturing, as the real one). The products themselves are the CPU's GEMM (linear_* below).
class Gemm {
 public:
  explicit Gemm(CudaStream stream, size_t workspace_bytes = 0);
  CudaStream stream() const { return stream_; }
  const float* ones(size_t n);

 private:
  CudaStream stream_;
  DeviceBuffer<float> ones_;
};

// A captured sequence of work, replayed by launch().
class CudaGraph {
 public:
  void capture(CudaStream stream, const std::function<void()>& step);
  void launch(CudaStream stream) const;
  bool ready() const { return ready_; }
  size_t node_count() const { return nodes_->size(); }

 private:
  std::shared_ptr<std::vector<std::function<void()>>> nodes_ = std::make_shared<std::vector<std::function<void()>>>();
  bool ready_ = false;
};

void pinned_free(void* p) noexcept;
int device_count();
std::string no_device_reason();
DeviceInfo device_info(int index);
void select_device(int index, const std::string& setting);
void synchronize(CudaStream stream);
DeviceMemory& device_memory();
void* pinned_allocate(size_t bytes);
void memcpy_async(CudaStream stream, void* dst, const void* src, size_t bytes, CopyKind kind);
void linear_forward(Gemm& gemm, float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N,
                    int IN, int OUT);
void linear_backward(Gemm& gemm, float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x,
                     int ldx, const float* w, int N, int IN, int OUT);
void linear_forward_bf16(Gemm& gemm, float* y, int ldy, const Bf16* x, int ldx, const Bf16* w, const float* b, int N,
                         int IN, int OUT);
void linear_backward_bf16(Gemm& gemm, float* dx, int lddx, float* dw, const Bf16* dy, int lddy, const Bf16* x, int ldx,
                          const Bf16* w, int N, int IN, int OUT);
void bias_backward(Gemm& gemm, float* db, const float* dy, int lddy, int N, int OUT);
void rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* w, int N, int C, float eps);
void rmsnorm_backward(CudaStream stream, float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int N, int C, double* scratch);
void layernorm_forward(CudaStream stream, float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps);
void layernorm_backward(CudaStream stream, float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C, double* scratch);
void gated_rmsnorm_forward(CudaStream stream, float* y, float* rstd, const float* x, const float* z, const float* w,
                           int N, int G, int Cg, int Cw, float eps, GateOrder order);
void gated_rmsnorm_backward(CudaStream stream, float* dx, float* dz, float* dw, const float* dy, const float* x,
                            const float* z, const float* w, const float* rstd, int N, int G, int Cg, int Cw,
                            GateOrder order, double* scratch);
void rope_forward(CudaStream stream, float* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base);
void rope_backward(CudaStream stream, float* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base);
void flash_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                             float scale);
void flash_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                              float scale, float* scratch);
void attention_forward(CudaStream stream, float* out, float* probs, const float* q, const float* k, const float* v,
                       int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D, float scale);
// cuDNN's fused attention (ops_cudnn_attention.cpp): the CPU kernel on bf16-rounded operands, results rounded to bf16
std::string cudnn_attention_unsupported(int B, int Tn, int H, int D, bool alibi, int window);
size_t cudnn_attention_workspace_bytes(int B, int Tn, int H, int D, bool alibi, int window, bool backward);
void cudnn_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                             void* workspace);
void cudnn_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                              void* workspace);
void canon_conv_forward(CudaStream stream, float* out, const float* in, const float* weight, int B, int Tn, int C,
                        int K, int G);
void canon_conv_backward(CudaStream stream, float* din, float* dweight, const float* dout, const float* in,
                         const float* weight, int B, int Tn, int C, int K, int G, double* scratch);
void dynamic_conv_forward(CudaStream stream, float* out, const float* in, const float* delta, int B, int Tn, int C,
                          int K);
void dynamic_conv_backward(CudaStream stream, float* din, float* ddelta, const float* dout, const float* in,
                           const float* delta, int B, int Tn, int C, int K);
void short_conv_bias_act_forward(CudaStream stream, float* y, int ldy, float* pre, const float* bias, int N, int C,
                                 bool silu);
void short_conv_act_backward(CudaStream stream, float* dpre, const float* dy, int lddy, const float* pre, int N, int C,
                             bool silu);
void short_conv_bias_backward(CudaStream stream, float* db, const float* dpre, int N, int C, double* scratch);
void gelu_forward(CudaStream stream, float* y, const float* x, size_t n);
void gelu_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void silu_forward(CudaStream stream, float* y, const float* x, size_t n);
void silu_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void relu2_forward(CudaStream stream, float* y, const float* x, size_t n);
void relu2_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void elu_forward(CudaStream stream, float* y, const float* x, size_t n);
void elu_backward(CudaStream stream, float* dx, const float* dy, const float* x, size_t n);
void swiglu_forward(CudaStream stream, float* y, const float* gate_up, int N, int Hd);
void swiglu_backward(CudaStream stream, float* dgate_up, const float* dy, const float* gate_up, int N, int Hd);
void sign_forward_columns(CudaStream stream, float* y, int ldy, const float* x, int ldx, int rows, int cols);
void sign_ste_backward_columns(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, const float* x,
                               int ldx, int rows, int cols, bool clipped);
void embedding_forward(CudaStream stream, float* out, const int* tokens, const float* table, int N, int C, int V);
void embedding_backward(CudaStream stream, float* dtable, const float* dout, const int* tokens, int N, int C, int V);
void cross_entropy_forward(CudaStream stream, float* losses, const float* logits, const int* targets, int N, int V);
void cross_entropy_backward(CudaStream stream, float* dlogits, const float* logits, const int* targets,
                            const float* dlosses, int N, int V);
void masked_mean_loss(CudaStream stream, double* loss, float* dlosses, const float* losses, const float* mask, int N,
                      const double* denominator);
void fill_zero(CudaStream stream, float* dst, size_t n);
void copy(CudaStream stream, float* dst, const float* src, size_t n);
void add(CudaStream stream, float* out, const float* a, const float* b, size_t n);
void add_into(CudaStream stream, float* dst, const float* src, size_t n);
void scale(CudaStream stream, float* y, const float* x, float s, size_t n);
void copy_columns(CudaStream stream, float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols);
void shift_add(CudaStream stream, float* xs, const float* x, int B, int Tn, int C, int offset);
void shift_add_backward(CudaStream stream, float* dx, const float* dxs, int B, int Tn, int C, int offset);
void convert_to_bf16(CudaStream stream, Bf16* dst, const float* src, size_t n);
void convert_columns_to_bf16(CudaStream stream, Bf16* dst, int ld_dst, const float* src, int ld_src, int rows,
                             int cols);
void add_positions(CudaStream stream, float* x, const float* pe, int B, int Tn, int C);
void add_positions_backward(CudaStream stream, float* dpe, const float* dx, int B, int Tn, int C);
void round_to_bf16(CudaStream stream, float* dst, const float* src, size_t n);
void token_shift_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, const float* coef,
                         TokenShift shift, int B, int Tn, int H, int D);
void token_shift_backward(CudaStream stream, float* dx, int lddx, float* dcoef, const float* dy, int lddy,
                          const float* x, int ldx, const float* coef, TokenShift shift, int B, int Tn, int H, int D,
                          double* scratch);
void repeat_heads_forward(CudaStream stream, float* y, int ldy, const float* x, int ldx, int N, int heads, int group,
                          int D);
void repeat_heads_backward(CudaStream stream, float* dx, int lddx, const float* dy, int lddy, int N, int heads,
                           int group, int D);
void first_non_finite(CudaStream stream, int64_t* index, const float* x, size_t n, int64_t* scratch);
void ssd_forward(CudaStream stream, float* y, float* states, const float* x, const float* dt, const float* A,
                 const float* Bm, const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk,
                 void* scratch);
void ssd_backward(CudaStream stream, float* dx, float* ddt, float* dA, float* dB, float* dC, const float* dy,
                  const float* states, const float* x, const float* dt, const float* A, const float* Bm,
                  const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk, void* scratch);
void mamba2_split_forward(CudaStream stream, float* x, float* Bm, float* Cm, float* z, float* dt, const float* xbc,
                          int ld_xbc, const float* mixed, const float* dt_bias, int N, int Dp, int Di, int GN, int CD,
                          int H);
void ssd_decay_rates(CudaStream stream, float* A, const float* A_log, int H);
void ssd_decay_rates_backward(CudaStream stream, float* dA_log, const float* dA, const float* A, int H);
void mamba2_skip_forward(CudaStream stream, float* y, const float* D, const float* x, int N, int H, int P);
void mamba2_split_backward(CudaStream stream, float* dxbc, int ld_dxbc, float* dmixed, float* ddt_bias, float* dD,
                           const float* dx, const float* dy, const float* dB, const float* dC, const float* dz,
                           const float* ddt, const float* mixed, const float* dt_bias, const float* D, const float* x,
                           int N, int Dp, int Di, int GN, int CD, int H, int P, double* scratch);
void gla_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                 const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk, void* scratch);
void gla_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dg, const float* dout,
                  const float* states, const float* q, const float* k, const float* v, const float* g, int B, int Tn,
                  int H, int K, int V, float scale, int chunk, void* scratch);
void gla_feature_forward(CudaStream stream, float* q, float* k, float* v, const float* qkv, int N, int Kd, int Vd,
                         FeatureMap fm);
void gla_feature_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                          const float* qkv, int N, int Kd, int Vd, FeatureMap fm);
void gla_gate_forward(CudaStream stream, float* gk, const float* logit, size_t n, double normalizer, double clamp_min);
void gla_gate_backward(CudaStream stream, float* dlogit, const float* dg, const float* logit, size_t n,
                       double normalizer, double clamp_min);
void delta_rule_forward(CudaStream stream, float* o, float* states, const float* q, const float* k, const float* v,
                        const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                        void* scratch);
void delta_rule_backward(CudaStream stream, float* dq, float* dk, float* dv, float* dbeta, float* dg,
                         const float* dout, const float* states, const float* q, const float* k, const float* v,
                         const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale, int chunk,
                         void* scratch);
void delta_inputs_forward(CudaStream stream, float* q, float* k, float* v, float* q_rstd, float* k_rstd, float* beta,
                          float* g, const float* qkv, const float* beta_logit, const float* a_logit,
                          const float* A_log, const float* dt_bias, int N, int H, int K, int Vd, double beta_scale);
void delta_beta_backward(CudaStream stream, float* dlogit, const float* dbeta, const float* beta_logit, size_t n,
                         double beta_scale);
void delta_decay_backward(CudaStream stream, float* du, float* dA_log, float* ddt_bias, const float* dg,
                          const float* a_logit, const float* g, const float* A_log, const float* dt_bias, int N, int H,
                          double* scratch);
void delta_inputs_backward(CudaStream stream, float* dqkv, const float* dq, const float* dk, const float* dv,
                           const float* q, const float* k, const float* q_rstd, const float* k_rstd, int N, int H,
                           int K, int Vd);
void grad_sum_squares(CudaStream stream, double* sumsq, const float* grads, size_t n, double* scratch);
void clip_grad_norm(CudaStream stream, float* grads, size_t n, const double* sumsq, double max_norm);
void step_guard(CudaStream stream, int32_t* halted_at, const int32_t* step, const double* values, int n);
void adamw_update(CudaStream stream, float* params, float* m, float* v, const float* grads, const uint8_t* decay,
                  size_t n, const AdamWCoefficients* c, const int32_t* halted_at, Bf16* params_bf16);

// ---- the stand-in's own instruments, for tests ----
// Bytes of stand-in device memory allocated and not yet freed, and the most there were since reset_peak_device_bytes().
size_t live_device_bytes();
size_t peak_device_bytes();
void reset_peak_device_bytes();
// How many ops have run (or been recorded) since the process started: tests check that a replay ran the step.
uint64_t ops_enqueued();

}  // namespace canonlab::cuda_host

namespace canonlab {

// The layer of cuda_layer.h over the stand-in.
struct HostCuda {
#define CANONLAB_HOST_CUDA_FORWARD(name) CANONLAB_CUDA_FORWARD(::canonlab::cuda_host, name)
  CANONLAB_CUDA_LAYER_FUNCTIONS(CANONLAB_HOST_CUDA_FORWARD)
#undef CANONLAB_HOST_CUDA_FORWARD
  using Stream = cuda_host::Stream;
  using Event = cuda_host::Event;
  using Gemm = cuda_host::Gemm;
  using Graph = cuda_host::CudaGraph;
};

namespace cuda_host_detail {
// The type of a stand-in function with its Gemm parameter taken as cuda::Gemm's, to compare with the real one.
template <class F>
struct AsCudaGemm {
  using type = F;
};
template <class R, class... A>
struct AsCudaGemm<R (*)(cuda_host::Gemm&, A...)> {
  using type = R (*)(cuda::Gemm&, A...);
};
}  // namespace cuda_host_detail

// Every stand-in function has exactly the signature of the CUDA function of its name (the Gemm excepted, which is the
// layer's own type).
#define CANONLAB_HOST_CUDA_SAME_SIGNATURE(name)                                                                      \
  static_assert(std::is_same_v<decltype(&::canonlab::cuda::name),                                                  \
                               cuda_host_detail::AsCudaGemm<decltype(&::canonlab::cuda_host::name)>::type>,         \
                "the host stand-in's " #name " does not have the signature of canonlab::cuda::" #name);
CANONLAB_CUDA_LAYER_FUNCTIONS(CANONLAB_HOST_CUDA_SAME_SIGNATURE)
#undef CANONLAB_HOST_CUDA_SAME_SIGNATURE

}  // namespace canonlab
