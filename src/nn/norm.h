#pragma once
// RMSNorm or LayerNorm over the last dimension, with a learnable scale (and bias for LayerNorm).
// Saves its statistics in the step arena for backward.
#include <string>
#include <vector>

#include "engine/ops/norm/fast.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

enum class NormKind { rmsnorm, layernorm };

template <class T>
class Norm {
 public:
  Norm(ParameterStore<T>& store, const std::string& name, int channels, NormKind kind, double eps)
      : name_(name), channels_(channels), kind_(kind), eps_(T(eps)) {
    weight_ = store.add(name + ".weight", {channels}, InitSpec::ones(), ParamGroup::norm);
    if (kind == NormKind::layernorm) bias_ = store.add(name + ".bias", {channels}, InitSpec::zeros(), ParamGroup::norm);
  }

  // x: (N, C) -> y: (N, C). x must stay alive until backward.
  void forward(StepContext<T>& ctx, T* y, const T* x, int N) {
    x_ = x;
    rstd_ = ctx.arena.template alloc<T>(N);
    if (kind_ == NormKind::rmsnorm) {
      ctx.backend.rmsnorm_forward(y, rstd_, x, weight_.value(), N, channels_, eps_);
    } else {
      mean_ = ctx.arena.template alloc<T>(N);
      ctx.backend.layernorm_forward(y, mean_, rstd_, x, weight_.value(), bias_.value(), N, channels_, eps_);
    }
    ctx.record(name_, y, size_t(N) * channels_);
  }
  // sum = a + b (the residual stream), then y = norm(sum): one pass for RMSNorm (Backend::add_rmsnorm_forward), the
  // two ops for LayerNorm. sum must stay alive until backward.
  void forward_after_add(StepContext<T>& ctx, T* sum, T* y, const T* a, const T* b, int N) {
    if (kind_ != NormKind::rmsnorm) {
      ctx.backend.add(sum, a, b, size_t(N) * channels_);
      forward(ctx, y, sum, N);
      return;
    }
    x_ = sum;
    rstd_ = ctx.arena.template alloc<T>(N);
    ctx.backend.add_rmsnorm_forward(sum, y, rstd_, a, b, weight_.value(), N, channels_, eps_);
    ctx.record(name_, y, size_t(N) * channels_);
  }
  // The same map without saving anything, on the host (decoding). x, y: (N, C).
  void apply(T* y, const T* x, int N) const {
    std::vector<T> mean(N), rstd(N);
    if (kind_ == NormKind::rmsnorm)
      rmsnorm_forward(y, rstd.data(), x, weight_.value(), N, channels_, eps_);
    else
      layernorm_forward(y, mean.data(), rstd.data(), x, weight_.value(), bias_.value(), N, channels_, eps_);
  }
  // For callers that apply this norm inside a fused op (CanonLayer): its parameters and epsilon.
  NormKind kind() const { return kind_; }
  T eps() const { return eps_; }
  T* weight_value() const { return weight_.value(); }
  T* weight_grad() const { return weight_.grad(); }
  T* bias_value() const { return kind_ == NormKind::layernorm ? bias_.value() : nullptr; }
  T* bias_grad() const { return kind_ == NormKind::layernorm ? bias_.grad() : nullptr; }
  // dy: (N, C) -> dx: (N, C) written.
  void backward(StepContext<T>& ctx, T* dx, const T* dy, int N) {
    if (kind_ == NormKind::rmsnorm)
      ctx.backend.rmsnorm_backward(dx, weight_.grad(), dy, x_, weight_.value(), rstd_, N, channels_);
    else
      ctx.backend.layernorm_backward(dx, weight_.grad(), bias_.grad(), dy, x_, weight_.value(), mean_, rstd_, N,
                                     channels_);
  }
  // The same with dres, the gradient that reaches x along the residual stream, added: dx = norm'(dy) + dres (one pass
  // for RMSNorm). dres: (N, C), not aliasing dx.
  void backward_add(StepContext<T>& ctx, T* dx, const T* dy, const T* dres, int N) {
    if (kind_ != NormKind::rmsnorm) {
      backward(ctx, dx, dy, N);
      ctx.backend.add_into(dx, dres, size_t(N) * channels_);
      return;
    }
    ctx.backend.rmsnorm_backward_add(dx, weight_.grad(), dy, dres, x_, weight_.value(), rstd_, N, channels_);
  }

 private:
  std::string name_;
  int channels_;
  NormKind kind_;
  T eps_;
  Param<T> weight_, bias_;
  const T* x_ = nullptr;
  T* mean_ = nullptr;
  T* rstd_ = nullptr;
};

inline NormKind parse_norm_kind(const std::string& s) { return s == "layernorm" ? NormKind::layernorm : NormKind::rmsnorm; }

}  // namespace canonlab
