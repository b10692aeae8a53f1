#pragma once
// The feed-forward half of a block:
//   gelu / relu2:  down( act( [CanonD] up(h) ) )                 up width W = hidden
//   swiglu:        down( silu(g) * u ), [g | u] = [CanonD] [gate(h) | up(h)]   W = 2 * hidden
// Canon-D sits after the up/gate projections and before the nonlinearity, as in the paper.
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/ops/activation/activation.h"
#include "nn/canon.h"
#include "nn/linear.h"

namespace canonlab {

enum class MlpKind { gelu, swiglu, relu2 };

template <class T>
class Mlp {
 public:
  void needs(std::vector<OpNeed>& out) const {
    if (canon_d_) canon_d_->needs(out);
  }

  Mlp(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg)
      : name_(name), C_(cfg.d_model), hidden_(cfg.mlp.hidden_dim) {
    kind_ = cfg.mlp.kind == "swiglu" ? MlpKind::swiglu : cfg.mlp.kind == "relu2" ? MlpKind::relu2 : MlpKind::gelu;
    width_ = kind_ == MlpKind::swiglu ? 2 * hidden_ : hidden_;
    if (kind_ == MlpKind::swiglu)
      gate_proj_ = std::make_unique<Linear<T>>(store, name + ".gate_proj", C_, hidden_, cfg.mlp.bias, cfg.init_std);
    up_proj_ = std::make_unique<Linear<T>>(store, name + ".up_proj", C_, hidden_, cfg.mlp.bias, cfg.init_std);
    if (cfg.canon.set.find('D') != std::string::npos)
      canon_d_ = std::make_unique<CanonLayer<T>>(store, name + ".canon_d", width_, cfg.canon, cfg.norm_eps);
    down_proj_ = std::make_unique<Linear<T>>(store, name + ".down_proj", hidden_, C_, cfg.mlp.bias, cfg.init_std);
  }

  // h: (N, C) -> y: (N, C)
  void forward(StepContext<T>& ctx, T* y, const T* h, int B, int Tn) {
    const int N = B * Tn;
    Backend<T>& be = ctx.backend;
    h_ = h;
    up_ = ctx.arena.template alloc<T>(size_t(N) * width_);
    if (kind_ == MlpKind::swiglu && gate_proj_->followed_in_memory_by(*up_proj_)) {
      // gate and up weights are one contiguous (2 * hidden, C) block: a single GEMM
      gemm_weight_forward(be, up_, width_, h, C_, gate_proj_->weight(), static_cast<const T*>(nullptr), N, C_, width_);
    } else if (kind_ == MlpKind::swiglu) {
      gate_proj_->forward(be, up_, width_, h, C_, N);
      up_proj_->forward(be, up_ + hidden_, width_, h, C_, N);
    } else {
      up_proj_->forward(be, up_, width_, h, C_, N);
    }
    pre_act_ = up_;
    if (canon_d_) {
      pre_act_ = ctx.arena.template alloc<T>(size_t(N) * width_);
      canon_d_->forward(ctx, pre_act_, up_, B, Tn);
    }
    act_ = ctx.arena.template alloc<T>(size_t(N) * hidden_);
    const size_t n = size_t(N) * hidden_;
    switch (kind_) {
      case MlpKind::gelu: be.gelu_forward(act_, pre_act_, n); break;
      case MlpKind::relu2: be.relu2_forward(act_, pre_act_, n); break;
      case MlpKind::swiglu: be.swiglu_forward(act_, pre_act_, N, hidden_); break;
    }
    down_proj_->forward(be, y, C_, act_, hidden_, N);
    ctx.record(name_, y, size_t(N) * C_);
  }

  // Decoding on the host (host memory only, fp32 weights): h, y: (B, C), one token per row; caches[b] is row b's
  // Canon-D cache (new_cache(); empty without Canon-D).
  std::vector<T> new_cache() const { return canon_d_ ? canon_d_->new_cache() : std::vector<T>{}; }
  void step(T* y, std::vector<std::vector<T>>& caches, const T* h, int B) const {
    std::vector<T> up(size_t(B) * width_), pre(size_t(B) * width_), act(size_t(B) * hidden_);
    if (kind_ == MlpKind::swiglu) {
      gate_proj_->apply(up.data(), width_, h, C_, B);
      up_proj_->apply(up.data() + hidden_, width_, h, C_, B);
    } else {
      up_proj_->apply(up.data(), width_, h, C_, B);
    }
    if (canon_d_) {
      for (int b = 0; b < B; b++) canon_d_->step(pre.data() + size_t(b) * width_, caches[b], up.data() + size_t(b) * width_);
    } else {
      pre = up;
    }
    const size_t n = size_t(B) * hidden_;
    switch (kind_) {
      case MlpKind::gelu: canonlab::gelu_forward(act.data(), pre.data(), n); break;
      case MlpKind::relu2: canonlab::relu2_forward(act.data(), pre.data(), n); break;
      case MlpKind::swiglu: canonlab::swiglu_forward(act.data(), pre.data(), B, hidden_); break;
    }
    down_proj_->apply(y, C_, act.data(), hidden_, B);
  }

  // dy: (N, C) -> dh: (N, C) written
  void backward(StepContext<T>& ctx, T* dh, const T* dy, int B, int Tn) {
    const int N = B * Tn;
    const size_t n = size_t(N) * hidden_;
    Backend<T>& be = ctx.backend;
    T* dact = ctx.arena.template alloc<T>(n);
    down_proj_->backward(be, dact, hidden_, dy, C_, act_, hidden_, N);
    T* dpre = ctx.arena.template alloc<T>(size_t(N) * width_);
    switch (kind_) {
      case MlpKind::gelu: be.gelu_backward(dpre, dact, pre_act_, n); break;
      case MlpKind::relu2: be.relu2_backward(dpre, dact, pre_act_, n); break;
      case MlpKind::swiglu: be.swiglu_backward(dpre, dact, pre_act_, N, hidden_); break;
    }
    T* dup = dpre;
    if (canon_d_) {
      dup = ctx.arena.template alloc<T>(size_t(N) * width_);
      canon_d_->backward(ctx, dup, dpre, B, Tn);
    }
    if (kind_ == MlpKind::swiglu && gate_proj_->followed_in_memory_by(*up_proj_)) {
      be.linear_backward(dh, C_, gate_proj_->weight().grad(), static_cast<T*>(nullptr), dup, width_, h_, C_,
                         gate_proj_->weight().gemm_value(), N, C_, width_);
    } else if (kind_ == MlpKind::swiglu) {
      T* dtmp = ctx.arena.template alloc<T>(size_t(N) * C_);
      gate_proj_->backward(be, dh, C_, dup, width_, h_, C_, N);
      up_proj_->backward(be, dtmp, C_, dup + hidden_, width_, h_, C_, N);
      be.add_into(dh, dtmp, size_t(N) * C_);
    } else {
      up_proj_->backward(be, dh, C_, dup, width_, h_, C_, N);
    }
  }

 private:
  std::string name_;
  int C_, hidden_, width_;
  MlpKind kind_;
  std::unique_ptr<Linear<T>> gate_proj_, up_proj_, down_proj_;
  std::unique_ptr<CanonLayer<T>> canon_d_;
  const T* h_ = nullptr;
  T* up_ = nullptr;
  T* pre_act_ = nullptr;
  T* act_ = nullptr;
};

}  // namespace canonlab
