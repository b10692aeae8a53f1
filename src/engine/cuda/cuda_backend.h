#pragma once
// CudaBackend: every op of Backend<float> on a GPU, as calls of the CUDA layer's kernel launchers (cuda_layer.h), on
// one stream. No kernel, <<<>>> or CUDA header here: plain C++ over a layer,
//   CudaBackendT<RealCuda>  the GPU (engine/cuda/cuda_backend_real.cpp, in builds with the CUDA kernels), and
//   CudaBackendT<HostCuda>  the same code over the host stand-in of the layer (tests/cuda_host/), which the CPU suite
//                           trains through on every CI run (CudaBackendOnHost.*),
// so the binding itself (argument order, strides, scratch sizes, what forward keeps for backward, the trainer's device
// path, the step as one graph) is tested without a GPU, and a GPU run tests the kernels.
//
// What the backend owns (ggml's per-stream context): the stream, the cuBLASLt Gemm (handle, workspace, algorithm
// cache), one workspace for the ops' scratch (grown to the largest request during the first, eager steps), the
// packed bf16 copy of the weights (train.precision: bf16), two pinned staging slots for uploads, and the captured
// step graphs. Its memory() orders every host copy after the work already on the stream, so host code (checkpoints,
// metrics, probes) reads what the step wrote.
//
// Differences from the CPU backend, each a contract of the kernels (docs/gpu.md): the attention state is one
// log-sum-exp per query row (a flash backward, never a (T, T) matrix); a probe's probabilities come from the
// materialising kernel while out and the state come from the flash forward (so they are the same bits with or without
// a probe); reductions keep their own fixed orders (deterministic, not the CPU's bits); the Canon branch runs as the
// separate ops (conv, activation, norm); dynamic Canon forms its offsets with a GEMM; int8 GEMMs, the per-step
// reference scans and recurrent decoding are the CPU's. With precision bf16, attention runs on cuDNN's fused
// attention where train.attention_kernel and cuDNN allow (use_cudnn: per case, reported in kernel_choices).
#include <algorithm>
#include <array>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/cuda/cuda_backend_options.h"
#include "engine/cuda/cuda_layer.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/ssd/naive.h"

namespace canonlab {

namespace cuda_backend_detail {

// The backend's memory: the layer's device memory, each host copy and fill ordered after the work already enqueued on
// the backend's stream (synchronised first), and a count of allocations and frees: a captured graph holds device
// addresses, so it is replayed only while no buffer has come or gone since its capture.
template <class Cuda>
class StreamOrderedMemory final : public DeviceMemory {
 public:
  StreamOrderedMemory(DeviceMemory& device, cuda::CudaStream stream) : device_(device), stream_(stream) {}
  Device device() const override { return Device::cuda; }
  bool host_accessible() const override { return device_.host_accessible(); }  // true only for a counting memory
  void* allocate(size_t bytes) override {
    generation_++;
    return device_.allocate(bytes);
  }
  void deallocate(void* p) noexcept override {
    generation_++;
    device_.deallocate(p);
  }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    Cuda::synchronize(stream_);
    device_.copy_from_host(dst, host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    Cuda::synchronize(stream_);
    device_.copy_to_host(host_dst, src, bytes);
  }
  void fill_bytes(void* dst, int byte, size_t bytes) override {
    Cuda::synchronize(stream_);
    device_.fill_bytes(dst, byte, bytes);
  }
  uint64_t generation() const { return generation_; }

 private:
  DeviceMemory& device_;
  cuda::CudaStream stream_;
  uint64_t generation_ = 0;
};

// The ops' scratch: one device buffer, grown to the largest request. Regions of one request are 256-byte aligned.
class Workspace {
 public:
  explicit Workspace(DeviceMemory& memory) : memory_(memory) {}
  // Pointers to N regions of the given byte sizes, valid until the next request.
  template <size_t N>
  std::array<std::byte*, N> regions(const std::array<size_t, N>& bytes) {
    std::array<size_t, N> offsets{};
    size_t total = 0;
    for (size_t i = 0; i < N; i++) offsets[i] = total, total += (bytes[i] + 255) / 256 * 256;
    if (total > buffer_.size()) buffer_ = DeviceBuffer<std::byte>(memory_, total + total / 4);  // room to grow
    std::array<std::byte*, N> out{};
    for (size_t i = 0; i < N; i++) out[i] = buffer_.data() + offsets[i];
    return out;
  }
  template <class T>
  T* get(size_t count) {
    return reinterpret_cast<T*>(regions<1>({count * sizeof(T)})[0]);
  }
  size_t bytes() const { return buffer_.size(); }

 private:
  DeviceMemory& memory_;
  DeviceBuffer<std::byte> buffer_;
};

}  // namespace cuda_backend_detail

template <class Cuda>
class CudaBackendT final : public Backend<float> {
  using Bf16 = cuda::Bf16;

 public:
  explicit CudaBackendT(const CudaBackendOptions& options)
      : options_((Cuda::select_device(options.device, "train.device=cuda:" + std::to_string(options.device)),
                  options)),  // the device is selected before the stream and everything else is created on it
        memory_(options.memory ? *options.memory : Cuda::device_memory(), stream_.get()),
        gemm_(stream_.get()),
        workspace_(memory_) {
    if (options_.attention != AttentionKernel::cudnn) return;
    CANONLAB_CHECK(bf16(), "train.attention_kernel: 'cudnn' runs attention in bf16 and needs train.precision: bf16");
    // cuDNN itself (the library, a device it runs on), asked with a case every version takes
    const std::string why = Cuda::cudnn_attention_unsupported(1, 128, 1, 64, false, 0);
    CANONLAB_CHECK(why.empty(), "train.attention_kernel: 'cudnn' on " + name() + ": " + why +
                                    "; allowed here: auto or flash (canonlab's flash kernel)");
  }
  ~CudaBackendT() override {
    try {
      Cuda::synchronize(stream_.get());
    } catch (...) {  // a fault already reported; nothing to add while unwinding
    }
    for (Staging& s : staging_) Cuda::pinned_free(s.host);
  }

  DeviceMemory& memory() override { return memory_; }
  Precision precision() const override { return options_.precision; }
  std::string name() const override { return "cuda:" + std::to_string(options_.device); }
  bool counts_only() const override { return options_.counting; }
  bool supports(OpGroup group) const override { return group != OpGroup::reference_scans; }
  long max_size(OpGroup group) const override {
    if (group == OpGroup::attention) return cuda::kFlashMaxHeadDim;
    if (group == OpGroup::canon) return kMaxCanonKernel;
    return 0;
  }
  // train.attention_kernel: cudnn takes every attention layer to cuDNN: a layer it cannot take is refused here,
  // before the model allocates (auto decides per case while running and reports it: kernel_choices).
  std::string refusal(const OpNeed& need) const override {
    if (need.group != OpGroup::attention || !bf16() || options_.attention != AttentionKernel::cudnn) return "";
    for (const OpFeature& f : need.features)
      if (f.name == "alibi")
        return f.key + " with train.attention_kernel: cudnn (" + std::string(kAlibiOnFlash) +
               "); allowed: train.attention_kernel: auto or flash";
    const std::string why = cuda::cudnn_attention_shape_unsupported(1, 1, 1, int(need.size));
    return why.empty() ? "" : need.size_key + ": " + why + " (train.attention_kernel: cudnn); allowed: auto or flash";
  }
  std::vector<std::string> kernel_choices() const override { return kernel_choices_; }
  cuda::CudaStream stream() const { return stream_.get(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

  // ---- linear layers ----
  void linear_forward(float* y, int ldy, const float* x, int ldx, const float* w, const float* b, int N, int IN,
                      int OUT) override {
    if (!bf16()) return Cuda::linear_forward(gemm_, y, ldy, x, ldx, w, b, N, IN, OUT);
    // x (N, IN) rows of stride ldx -> dense bf16 (N, IN); w: the packed shadow, or converted here
    const bool packed = in_shadow(w, size_t(OUT) * IN);
    const auto r = workspace_.regions<2>({size_t(N) * IN * sizeof(Bf16), packed ? 0 : size_t(OUT) * IN * sizeof(Bf16)});
    Bf16* xb = reinterpret_cast<Bf16*>(r[0]);
    Cuda::convert_columns_to_bf16(stream(), xb, IN, x, ldx, N, IN);
    const Bf16* wb = bf16_weight(w, size_t(OUT) * IN, reinterpret_cast<Bf16*>(r[1]));
    Cuda::linear_forward_bf16(gemm_, y, ldy, xb, IN, wb, b, N, IN, OUT);
  }
  void linear_backward(float* dx, int lddx, float* dw, float* db, const float* dy, int lddy, const float* x, int ldx,
                       const float* w, int N, int IN, int OUT) override {
    if (!bf16()) return Cuda::linear_backward(gemm_, dx, lddx, dw, db, dy, lddy, x, ldx, w, N, IN, OUT);
    const bool packed = in_shadow(w, size_t(OUT) * IN);
    const auto r = workspace_.regions<3>({size_t(N) * OUT * sizeof(Bf16), size_t(N) * IN * sizeof(Bf16),
                                          packed ? 0 : size_t(OUT) * IN * sizeof(Bf16)});
    Bf16* dyb = reinterpret_cast<Bf16*>(r[0]);
    Bf16* xb = reinterpret_cast<Bf16*>(r[1]);
    Cuda::convert_columns_to_bf16(stream(), dyb, OUT, dy, lddy, N, OUT);
    Cuda::convert_columns_to_bf16(stream(), xb, IN, x, ldx, N, IN);
    const Bf16* wb = bf16_weight(w, size_t(OUT) * IN, reinterpret_cast<Bf16*>(r[2]));
    Cuda::linear_backward_bf16(gemm_, dx, lddx, dw, dyb, OUT, xb, IN, wb, N, IN, OUT);
    if (db) Cuda::bias_backward(gemm_, db, dy, lddy, N, OUT);
  }
  void linear_forward_int8(float*, int, const float*, int, const int8_t*, const float*, const float*, int, int,
                           int) override {
    throw Error(name() + ": int8 inference (--int8) runs on the CPU only; use train.device=cpu");
  }
  // The shadow weights of bf16 precision, and (for the GEMMs) their packed bf16 copy, in one pass each.
  void round_to_bf16(float* dst, const float* src, size_t n) override {
    Cuda::round_to_bf16(stream(), dst, src, n);
    if (!bf16()) return;
    if (packed_.size() != n) packed_ = DeviceBuffer<Bf16>(memory_, n);
    Cuda::convert_to_bf16(stream(), packed_.data(), src, n);
    shadow_ = dst;
  }

  // ---- norms ----
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int N, int C, float eps) override {
    Cuda::rmsnorm_forward(stream(), y, rstd, x, w, N, C, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                        int N, int C) override {
    double* scratch = workspace_.get<double>(Cuda::norm_backward_scratch_size(N, C));
    Cuda::rmsnorm_backward(stream(), dx, dw, dy, x, w, rstd, N, C, scratch);
  }
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int N,
                         int C, float eps) override {
    Cuda::layernorm_forward(stream(), y, mean, rstd, x, w, b, N, C, eps);
  }
  void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    double* scratch = workspace_.get<double>(Cuda::norm_backward_scratch_size(N, C));
    Cuda::layernorm_backward(stream(), dx, dw, db, dy, x, w, mean, rstd, N, C, scratch);
  }
  void gated_rmsnorm_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int N, int G,
                             int Cg, int Cw, float eps, GateOrder order) override {
    Cuda::gated_rmsnorm_forward(stream(), y, rstd, x, z, w, N, G, Cg, Cw, eps, order);
  }
  void gated_rmsnorm_backward(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                              const float* w, const float* rstd, int N, int G, int Cg, int Cw,
                              GateOrder order) override {
    double* scratch = workspace_.get<double>(Cuda::gated_rmsnorm_backward_scratch_size(Cw));
    Cuda::gated_rmsnorm_backward(stream(), dx, dz, dw, dy, x, z, w, rstd, N, G, Cg, Cw, order, scratch);
  }

  // ---- attention ----
  void rope_forward(float* x, int ld, int B, int Tn, int H, int D, int rope_dim, double base) override {
    Cuda::rope_forward(stream(), x, ld, B, Tn, H, D, rope_dim, base);
  }
  void rope_backward(float* dx, int ld, int B, int Tn, int H, int D, int rope_dim, double base) override {
    Cuda::rope_backward(stream(), dx, ld, B, Tn, H, D, rope_dim, base);
  }
  // one log-sum-exp per (b, h, query)
  size_t attention_state_size(int B, int Tn, int H) const override { return size_t(B) * H * Tn; }
  size_t attention_scratch_size(int Tn) const override { return 0; }  // the workspace serves it
  void attention_forward(float* out, float* state, float* probs, const float* q, const float* k, const float* v,
                         int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D, float scale,
                         float* scratch) override {
    if (use_cudnn({B, Tn, H, D, alibi_slopes != nullptr, window})) {
      void* ws = workspace_.get<std::byte>(Cuda::cudnn_attention_workspace_bytes(B, Tn, H, D, false, window, false));
      Cuda::cudnn_attention_forward(stream(), out, state, q, k, v, ld_qkv, false, window, B, Tn, H, D, scale, ws);
    } else {
      Cuda::flash_attention_forward(stream(), out, state, q, k, v, ld_qkv, alibi_slopes, window, B, Tn, H, D, scale);
    }
    if (!probs) return;
    // A probe: the probabilities from the materialising kernel, its output discarded (out is the flash forward's).
    float* discarded = workspace_.get<float>(size_t(B) * Tn * H * D);
    Cuda::attention_forward(stream(), discarded, probs, q, k, v, ld_qkv, alibi_slopes, window, B, Tn, H, D, scale);
  }
  void attention_backward(float* dq, float* dk, float* dv, int ld_dqkv, const float* dout, const float* out,
                          const float* state, const float* q, const float* k, const float* v, int ld_qkv,
                          const float* alibi_slopes, int window, int B, int Tn, int H, int D, float scale,
                          float* scratch) override {
    if (use_cudnn({B, Tn, H, D, alibi_slopes != nullptr, window})) {
      void* ws = workspace_.get<std::byte>(Cuda::cudnn_attention_workspace_bytes(B, Tn, H, D, false, window, true));
      return Cuda::cudnn_attention_backward(stream(), dq, dk, dv, ld_dqkv, dout, out, state, q, k, v, ld_qkv, false,
                                            window, B, Tn, H, D, scale, ws);
    }
    float* rowsums = workspace_.get<float>(Cuda::flash_attention_scratch_size(B, Tn, H));
    Cuda::flash_attention_backward(stream(), dq, dk, dv, ld_dqkv, dout, out, state, q, k, v, ld_qkv, alibi_slopes,
                                   window, B, Tn, H, D, scale, rowsums);
  }

  // ---- convolutions ----
  void canon_conv_forward(float* out, const float* in, const float* weight, int B, int Tn, int C, int K,
                          int G) override {
    Cuda::canon_conv_forward(stream(), out, in, weight, B, Tn, C, K, G);
  }
  void canon_conv_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight, int B,
                           int Tn, int C, int K, int G) override {
    double* scratch = workspace_.get<double>(Cuda::canon_conv_backward_scratch_size(B, Tn, C, K, G));
    Cuda::canon_conv_backward(stream(), din, dweight, dout, in, weight, B, Tn, C, K, G, scratch);
  }
  void dynamic_conv_forward(float* out, const float* in, const float* delta, int B, int Tn, int C, int K) override {
    Cuda::dynamic_conv_forward(stream(), out, in, delta, B, Tn, C, K);
  }
  void dynamic_conv_backward(float* din, float* ddelta, const float* dout, const float* in, const float* delta, int B,
                             int Tn, int C, int K) override {
    Cuda::dynamic_conv_backward(stream(), din, ddelta, dout, in, delta, B, Tn, C, K);
  }
  void short_conv_bias_act_forward(float* y, int ldy, float* pre, const float* bias, int N, int C,
                                   bool silu) override {
    Cuda::short_conv_bias_act_forward(stream(), y, ldy, pre, bias, N, C, silu);
  }
  void short_conv_act_backward(float* dpre, const float* dy, int lddy, const float* pre, int N, int C,
                               bool silu) override {
    Cuda::short_conv_act_backward(stream(), dpre, dy, lddy, pre, N, C, silu);
  }
  void short_conv_bias_backward(float* db, const float* dpre, int N, int C) override {
    double* scratch = workspace_.get<double>(Cuda::short_conv_bias_backward_scratch_size(C));
    Cuda::short_conv_bias_backward(stream(), db, dpre, N, C, scratch);
  }

  // ---- activations ----
  void gelu_forward(float* y, const float* x, size_t n) override { Cuda::gelu_forward(stream(), y, x, n); }
  void gelu_backward(float* dx, const float* dy, const float* x, size_t n) override {
    Cuda::gelu_backward(stream(), dx, dy, x, n);
  }
  void silu_forward(float* y, const float* x, size_t n) override { Cuda::silu_forward(stream(), y, x, n); }
  void silu_backward(float* dx, const float* dy, const float* x, size_t n) override {
    Cuda::silu_backward(stream(), dx, dy, x, n);
  }
  void relu2_forward(float* y, const float* x, size_t n) override { Cuda::relu2_forward(stream(), y, x, n); }
  void relu2_backward(float* dx, const float* dy, const float* x, size_t n) override {
    Cuda::relu2_backward(stream(), dx, dy, x, n);
  }
  void elu_forward(float* y, const float* x, size_t n) override { Cuda::elu_forward(stream(), y, x, n); }
  void elu_backward(float* dx, const float* dy, const float* x, size_t n) override {
    Cuda::elu_backward(stream(), dx, dy, x, n);
  }
  void swiglu_forward(float* y, const float* gate_up, int N, int Hd) override {
    Cuda::swiglu_forward(stream(), y, gate_up, N, Hd);
  }
  void swiglu_backward(float* dgate_up, const float* dy, const float* gate_up, int N, int Hd) override {
    Cuda::swiglu_backward(stream(), dgate_up, dy, gate_up, N, Hd);
  }
  void sign_forward_rows(float* y, int ldy, const float* x, int ldx, int N, int width) override {
    Cuda::sign_forward_columns(stream(), y, ldy, x, ldx, N, width);
  }
  void sign_ste_backward_rows(float* dx, int lddx, const float* dy, int lddy, const float* x, int ldx, int N,
                              int width, bool clipped) override {
    Cuda::sign_ste_backward_columns(stream(), dx, lddx, dy, lddy, x, ldx, N, width, clipped);
  }

  // ---- embedding and loss ----
  void embedding_forward(float* out, const int* tokens, const float* table, int N, int C, int V) override {
    Cuda::embedding_forward(stream(), out, tokens, table, N, C, V);
  }
  void embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C, int V) override {
    Cuda::embedding_backward(stream(), dtable, dout, tokens, N, C, V);
  }
  void masked_cross_entropy(float* losses, float* dlosses, float* dlogits, const float* logits, const int* targets,
                            const float* mask, int N, int V, const double* denominator, double* loss) override {
    Cuda::cross_entropy_forward(stream(), losses, logits, targets, N, V);
    Cuda::masked_mean_loss(stream(), loss, dlogits ? dlosses : nullptr, losses, mask, N, denominator);
    if (dlogits) Cuda::cross_entropy_backward(stream(), dlogits, logits, targets, dlosses, N, V);
  }

  // ---- elementwise and copies ----
  void add(float* out, const float* a, const float* b, size_t n) override { Cuda::add(stream(), out, a, b, n); }
  void add_into(float* dst, const float* src, size_t n) override { Cuda::add_into(stream(), dst, src, n); }
  void copy(float* dst, const float* src, size_t n) override { Cuda::copy(stream(), dst, src, n); }
  void fill_zero(float* dst, size_t n) override { Cuda::fill_zero(stream(), dst, n); }
  void copy_rows(float* dst, int ldd, const float* src, int lds, int rows, int cols) override {
    Cuda::copy_columns(stream(), dst, ldd, src, lds, rows, cols);
  }
  void shift_add_forward(float* xs, const float* x, int B, int Tn, int C, int offset) override {
    Cuda::shift_add(stream(), xs, x, B, Tn, C, offset);
  }
  void shift_add_backward(float* dx, const float* dxs, int B, int Tn, int C, int offset) override {
    Cuda::shift_add_backward(stream(), dx, dxs, B, Tn, C, offset);
  }
  void add_positions(float* x, const float* pe, int B, int Tn, int C) override {
    Cuda::add_positions(stream(), x, pe, B, Tn, C);
  }
  void add_positions_backward(float* dpe, const float* dx, int B, int Tn, int C) override {
    Cuda::add_positions_backward(stream(), dpe, dx, B, Tn, C);
  }
  void token_shift_forward(float* y, int ldy, const float* x, int ldx, const float* coef, const TokenShift& shift,
                           int B, int Tn, int H, int D) override {
    Cuda::token_shift_forward(stream(), y, ldy, x, ldx, coef, shift, B, Tn, H, D);
  }
  void token_shift_backward(float* dx, int lddx, float* dcoef, const float* dy, int lddy, const float* x, int ldx,
                            const float* coef, const TokenShift& shift, int B, int Tn, int H, int D) override {
    double* scratch = workspace_.get<double>(Cuda::token_shift_backward_scratch_size(shift, H));
    Cuda::token_shift_backward(stream(), dx, lddx, dcoef, dy, lddy, x, ldx, coef, shift, B, Tn, H, D, scratch);
  }
  void repeat_heads_forward(float* y, int ldy, const float* x, int ldx, int N, int heads, int group, int D) override {
    Cuda::repeat_heads_forward(stream(), y, ldy, x, ldx, N, heads, group, D);
  }
  void repeat_heads_backward(float* dx, int lddx, const float* dy, int lddy, int N, int heads, int group,
                             int D) override {
    Cuda::repeat_heads_backward(stream(), dx, lddx, dy, lddy, N, heads, group, D);
  }

  // ---- Mamba2 ----
  size_t ssd_states_size(int B, int Tn, int H, int P, int N, int chunk) const override {
    return canonlab::ssd_states_size(B, Tn, H, P, N, chunk);
  }
  void ssd_forward_chunked(float* y, float* states, const float* x, const float* dt, const float* A, const float* Bm,
                           const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk) override {
    void* scratch = workspace_.get<std::byte>(Cuda::ssd_scratch_bytes(B, Tn, H, P, G, N, chunk, false));
    Cuda::ssd_forward(stream(), y, states, x, dt, A, Bm, Cm, B, Tn, H, P, G, N, chunk, scratch);
  }
  void ssd_backward_chunked(float* dx, float* ddt, float* dA, float* dB, float* dC, const float* dy,
                            const float* states, const float* x, const float* dt, const float* A, const float* Bm,
                            const float* Cm, int B, int Tn, int H, int P, int G, int N, int chunk) override {
    void* scratch = workspace_.get<std::byte>(Cuda::ssd_scratch_bytes(B, Tn, H, P, G, N, chunk, true));
    Cuda::ssd_backward(stream(), dx, ddt, dA, dB, dC, dy, states, x, dt, A, Bm, Cm, B, Tn, H, P, G, N, chunk, scratch);
  }
  void mamba2_split_forward(float* x, float* Bm, float* Cm, float* z, float* dt, const float* xbc, int ld_xbc,
                            const float* mixed, const float* dt_bias, int N, int Dp, int Di, int GN, int CD,
                            int H) override {
    Cuda::mamba2_split_forward(stream(), x, Bm, Cm, z, dt, xbc, ld_xbc, mixed, dt_bias, N, Dp, Di, GN, CD, H);
  }
  void ssd_decay_rates(float* A, const float* A_log, int H) override { Cuda::ssd_decay_rates(stream(), A, A_log, H); }
  void ssd_decay_rates_backward(float* dA_log, const float* dA, const float* A, int H) override {
    Cuda::ssd_decay_rates_backward(stream(), dA_log, dA, A, H);
  }
  void mamba2_skip_forward(float* y, const float* D, const float* x, int N, int H, int P) override {
    Cuda::mamba2_skip_forward(stream(), y, D, x, N, H, P);
  }
  void mamba2_split_backward(float* dxbc, int ld_dxbc, float* dmixed, float* ddt_bias, float* dD, const float* dx,
                             const float* dy, const float* dB, const float* dC, const float* dz, const float* ddt,
                             const float* mixed, const float* dt_bias, const float* D, const float* x, int N, int Dp,
                             int Di, int GN, int CD, int H, int P) override {
    double* scratch = workspace_.get<double>(Cuda::mamba2_split_backward_scratch_size(H));
    Cuda::mamba2_split_backward(stream(), dxbc, ld_dxbc, dmixed, ddt_bias, dD, dx, dy, dB, dC, dz, ddt, mixed, dt_bias,
                                D, x, N, Dp, Di, GN, CD, H, P, scratch);
  }

  // ---- GLA ----
  size_t gla_states_size(int B, int Tn, int H, int K, int V, int chunk) const override {
    return canonlab::gla_states_size(B, Tn, H, K, V, chunk);
  }
  void gla_forward_chunked(float* o, float* states, const float* q, const float* k, const float* v, const float* g,
                           int B, int Tn, int H, int K, int V, float scale, int chunk) override {
    void* scratch = workspace_.get<std::byte>(Cuda::gla_scratch_bytes(B, Tn, H, K, V, chunk, false));
    Cuda::gla_forward(stream(), o, states, q, k, v, g, B, Tn, H, K, V, scale, chunk, scratch);
  }
  void gla_backward_chunked(float* dq, float* dk, float* dv, float* dg, const float* dout, const float* states,
                            const float* q, const float* k, const float* v, const float* g, int B, int Tn, int H, int K,
                            int V, float scale, int chunk) override {
    void* scratch = workspace_.get<std::byte>(Cuda::gla_scratch_bytes(B, Tn, H, K, V, chunk, true));
    Cuda::gla_backward(stream(), dq, dk, dv, dg, dout, states, q, k, v, g, B, Tn, H, K, V, scale, chunk, scratch);
  }
  void gla_feature_forward(float* q, float* k, float* v, const float* qkv, int N, int Kd, int Vd,
                           FeatureMap fm) override {
    Cuda::gla_feature_forward(stream(), q, k, v, qkv, N, Kd, Vd, fm);
  }
  void gla_feature_backward(float* dqkv, const float* dq, const float* dk, const float* dv, const float* qkv, int N,
                            int Kd, int Vd, FeatureMap fm) override {
    Cuda::gla_feature_backward(stream(), dqkv, dq, dk, dv, qkv, N, Kd, Vd, fm);
  }
  void gla_gate_forward(float* gk, const float* logit, size_t n, double normalizer, double clamp_min) override {
    Cuda::gla_gate_forward(stream(), gk, logit, n, normalizer, clamp_min);
  }
  void gla_gate_backward(float* dlogit, const float* dg, const float* logit, size_t n, double normalizer,
                         double clamp_min) override {
    Cuda::gla_gate_backward(stream(), dlogit, dg, logit, n, normalizer, clamp_min);
  }

  // ---- (Gated) DeltaNet ----
  size_t delta_rule_states_size(int B, int Tn, int H, int K, int V, int chunk) const override {
    return canonlab::delta_rule_states_size(B, Tn, H, K, V, chunk);
  }
  void delta_rule_forward_chunked(float* o, float* states, const float* q, const float* k, const float* v,
                                  const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale,
                                  int chunk) override {
    void* scratch = workspace_.get<std::byte>(Cuda::delta_rule_scratch_bytes(B, Tn, H, K, V, chunk, false));
    Cuda::delta_rule_forward(stream(), o, states, q, k, v, beta, g, B, Tn, H, K, V, scale, chunk, scratch);
  }
  void delta_rule_backward_chunked(float* dq, float* dk, float* dv, float* dbeta, float* dg, const float* dout,
                                   const float* states, const float* q, const float* k, const float* v,
                                   const float* beta, const float* g, int B, int Tn, int H, int K, int V, float scale,
                                   int chunk) override {
    void* scratch = workspace_.get<std::byte>(Cuda::delta_rule_scratch_bytes(B, Tn, H, K, V, chunk, true));
    Cuda::delta_rule_backward(stream(), dq, dk, dv, dbeta, dg, dout, states, q, k, v, beta, g, B, Tn, H, K, V, scale,
                              chunk, scratch);
  }
  void delta_inputs_forward(float* q, float* k, float* v, float* q_rstd, float* k_rstd, float* beta, float* g,
                            const float* qkv, const float* beta_logit, const float* a_logit, const float* A_log,
                            const float* dt_bias, int N, int H, int K, int Vd, double beta_scale) override {
    Cuda::delta_inputs_forward(stream(), q, k, v, q_rstd, k_rstd, beta, g, qkv, beta_logit, a_logit, A_log, dt_bias, N,
                               H, K, Vd, beta_scale);
  }
  void delta_beta_backward(float* dlogit, const float* dbeta, const float* beta_logit, size_t n,
                           double beta_scale) override {
    Cuda::delta_beta_backward(stream(), dlogit, dbeta, beta_logit, n, beta_scale);
  }
  void delta_decay_backward(float* du, float* dA_log, float* ddt_bias, const float* dg, const float* a_logit,
                            const float* g, const float* A_log, const float* dt_bias, int N, int H) override {
    double* scratch = workspace_.get<double>(Cuda::delta_decay_backward_scratch_size(H));
    Cuda::delta_decay_backward(stream(), du, dA_log, ddt_bias, dg, a_logit, g, A_log, dt_bias, N, H, scratch);
  }
  void delta_inputs_backward(float* dqkv, const float* dq, const float* dk, const float* dv, const float* q,
                             const float* k, const float* q_rstd, const float* k_rstd, int N, int H, int K,
                             int Vd) override {
    Cuda::delta_inputs_backward(stream(), dqkv, dq, dk, dv, q, k, q_rstd, k_rstd, N, H, K, Vd);
  }

  // ---- optimizer and checks ----
  void grad_sum_squares(const float* g, size_t n, double* sumsq) override {
    double* scratch = workspace_.get<double>(Cuda::grad_norm_scratch_size());
    Cuda::grad_sum_squares(stream(), sumsq, g, n, scratch);
  }
  void clip_grad_norm(float* g, size_t n, const double* sumsq, double max_norm) override {
    Cuda::clip_grad_norm(stream(), g, n, sumsq, max_norm);
  }
  void scale(float* x, size_t n, double coef) override { Cuda::scale(stream(), x, x, float(coef), n); }
  void step_guard(int32_t* halted_at, const int32_t* step, const double* values, int n) override {
    Cuda::step_guard(stream(), halted_at, step, values, n);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, size_t n,
                    const AdamWCoefficients* c, const int32_t* halted_at) override {
    Cuda::adamw_update(stream(), params, m, v, grads, decay, n, c, halted_at, nullptr);
  }
  size_t first_non_finite(const float* x, size_t n) override {
    const auto r = workspace_.regions<2>({sizeof(int64_t), Cuda::first_non_finite_scratch_size() * sizeof(int64_t)});
    int64_t* index = reinterpret_cast<int64_t*>(r[0]);
    Cuda::first_non_finite(stream(), index, x, n, reinterpret_cast<int64_t*>(r[1]));
    int64_t host = 0;
    memory_.copy_to_host(&host, index, sizeof host);
    return size_t(host);
  }

  // ---- ordering ----
  // Through one of two pinned slots: the slot's previous copy has run (its event) before the host refills it, so the
  // host runs at most a step ahead of the GPU and never waits for the step in flight.
  void upload_async(void* dst, const void* host_src, size_t bytes) override {
    Staging& slot = staging_[next_slot_];
    next_slot_ = 1 - next_slot_;
    slot.copied.synchronize();
    if (slot.bytes < bytes) {
      Cuda::pinned_free(slot.host);
      slot.host = nullptr;
      slot.host = Cuda::pinned_allocate(bytes);
      slot.bytes = bytes;
    }
    if (bytes > 0) std::memcpy(slot.host, host_src, bytes);
    Cuda::memcpy_async(stream(), dst, slot.host, bytes, cuda::CopyKind::host_to_device);
    slot.copied.record(stream());
  }
  void synchronize() override { Cuda::synchronize(stream()); }

  // The first calls of a key run eagerly (they size the arena and the workspace, pick each GEMM's algorithm and
  // upload constants); after an eager run that allocated nothing, neither during it nor since the one before, the
  // next call is captured and launched, and later calls replay that graph for as long as no device buffer has come
  // or gone since its capture. A capture the layer refuses (the step waited on the host or allocated: a bug) is an
  // Error, never a silent fall-back.
  void run_step(uint64_t key, const std::function<void()>& enqueue) override {
    if (!options_.graphs) return enqueue();
    StepGraph& g = graphs_[key];
    if (g.graph.ready() && g.generation == memory_.generation()) {
      g.graph.launch(stream());
      replayed_++;
      return;
    }
    if (g.clean_runs >= 1) {
      g.graph.capture(stream(), enqueue);
      g.generation = memory_.generation();
      g.clean_runs = 0;
      g.graph.launch(stream());
      replayed_++;
      return;
    }
    const uint64_t before = memory_.generation();
    enqueue();
    const bool clean = memory_.generation() == before && before == g.last_generation;
    g.clean_runs = clean ? g.clean_runs + 1 : 0;
    g.last_generation = memory_.generation();
  }
  uint64_t replayed_steps() const override { return replayed_; }

 private:
  static constexpr long kMaxCanonKernel = 1024;  // canon_conv/cuda.h: the fused kernels' limit
  // Why ALiBi layers stay on the flash kernel: the model's slopes are its own, exactly as the CPU's
  static constexpr const char* kAlibiOnFlash =
      "cuDNN's ALiBi computes its own slopes (the press rule, in float), which need not be the model's "
      "(model.attention.alibi_slopes) to the last bit, and uploads them from pageable memory on every call";

  // One attention case; its kernel is chosen on its first call and kept, so forward and backward agree.
  struct AttentionCase {
    int B, Tn, H, D;
    bool alibi;
    int window;
    auto operator<=>(const AttentionCase&) const = default;
  };
  // train.attention_kernel's choice for a case: bf16 precision and auto or cudnn, and cuDNN takes it (not ALiBi:
  // kAlibiOnFlash). auto falls back to the flash kernel and says why; cudnn makes a refusal an Error.
  bool use_cudnn(const AttentionCase& c) {
    if (!bf16() || options_.attention == AttentionKernel::flash) return false;
    if (const auto it = attention_kernels_.find(c); it != attention_kernels_.end()) return it->second;
    const std::string why = c.alibi ? std::string("ALiBi: ") + kAlibiOnFlash
                                    : Cuda::cudnn_attention_unsupported(c.B, c.Tn, c.H, c.D, false, c.window);
    const std::string which = "attention B=" + std::to_string(c.B) + " T=" + std::to_string(c.Tn) +
                              " H=" + std::to_string(c.H) + " D=" + std::to_string(c.D) +
                              (c.window > 0 ? " window=" + std::to_string(c.window) : std::string()) +
                              (c.alibi ? " ALiBi" : "");
    CANONLAB_CHECK(why.empty() || options_.attention != AttentionKernel::cudnn,
                   "train.attention_kernel: cudnn: cuDNN cannot run " + which + ": " + why +
                       "; allowed: train.attention_kernel: auto (the flash kernel where cuDNN cannot) or flash");
    kernel_choices_.push_back(which + ": " + (why.empty() ? "cuDNN fused attention, bf16 inputs, fp32 statistics"
                                                          : "canonlab's flash kernel, fp32 (" + why + ")"));
    return attention_kernels_[c] = why.empty();
  }

  bool bf16() const { return options_.precision == Precision::bf16; }
  bool in_shadow(const float* w, size_t count) const {
    return shadow_ && w >= shadow_ && w + count <= shadow_ + packed_.size();
  }
  // The bf16 form of GEMM weights: their place in the packed copy of the shadow, or converted into `scratch`
  const Bf16* bf16_weight(const float* w, size_t count, Bf16* scratch) {
    if (in_shadow(w, count)) return packed_.data() + (w - shadow_);
    Cuda::convert_to_bf16(stream(), scratch, w, count);
    return scratch;
  }

  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    typename Cuda::Event copied;
  };
  struct StepGraph {
    typename Cuda::Graph graph;
    uint64_t generation = 0;                  // memory_'s generation when captured
    uint64_t last_generation = ~uint64_t(0);  // memory_'s generation after the last eager run
    int clean_runs = 0;                       // eager runs in a row that allocated nothing, during or between them
  };

  const CudaBackendOptions options_;  // first: selects the device before anything is created on it
  typename Cuda::Stream stream_;
  cuda_backend_detail::StreamOrderedMemory<Cuda> memory_;
  typename Cuda::Gemm gemm_;
  cuda_backend_detail::Workspace workspace_;
  DeviceBuffer<Bf16> packed_;   // bf16 precision: the packed bf16 weights, rounded from the master values
  const float* shadow_ = nullptr;  // where the fp32 shadow that packed_ mirrors lives
  std::array<Staging, 2> staging_;
  int next_slot_ = 0;
  std::map<uint64_t, StepGraph> graphs_;
  uint64_t replayed_ = 0;
  std::map<AttentionCase, bool> attention_kernels_;  // bf16: true = cuDNN, false = the flash kernel
  std::vector<std::string> kernel_choices_;
};

}  // namespace canonlab
