#pragma once
// Canon layer (Physics of LMs 4.1): a causal 1-D convolution over time that mixes each position with its
// K-1 predecessors.  out = [h +] norm(act(conv(h)))
// With model.canon.dynamic = R > 0 the conv's kernel at each position is W + Δ_t, Δ_t a rank-R map of h_t
// (nn/dynamic_canon.h, docs/canon-variants.md).
// Defaults follow the paper: depthwise, kernel 4, no bias, residual, no activation, PyTorch-default init
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) rather than normal(0.02) — the O(1) init is what makes it help.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/epilogue.h"
#include "engine/ops/canon_conv/naive.h"
#include "engine/params.h"
#include "nn/context.h"
#include "nn/dynamic_canon.h"
#include "nn/norm.h"

namespace canonlab {

enum class Activation { none, silu, elu };

template <class T>
class CanonLayer {
 public:
  // What this layer needs from the backend (engine/backend/capabilities.h).
  void needs(std::vector<OpNeed>& out) const {
    out.push_back({OpGroup::canon, name_ + " (model.canon.set)", kernel_, "kernel size (model.canon.kernel_size)"});
    if (dynamic_) out.push_back({OpGroup::dynamic_canon, name_ + " (model.canon.dynamic)"});
  }

  CanonLayer(ParameterStore<T>& store, const std::string& name, int channels, const CanonConfig& cfg, double norm_eps)
      : name_(name),
        channels_(channels),
        kernel_(cfg.kernel_size),
        groups_(cfg.groups > 0 ? cfg.groups : channels),
        residual_(cfg.residual),
        activation_(cfg.activation == "silu" ? Activation::silu
                    : cfg.activation == "elu" ? Activation::elu
                                              : Activation::none) {
    CANONLAB_CHECK(channels % groups_ == 0, name + ": canon.groups=" + std::to_string(groups_) +
                                                " does not divide " + std::to_string(channels) + " channels");
    int fan_in = (channels / groups_) * kernel_;
    weight_ = store.add(name + ".weight", {channels, channels / groups_, kernel_},
                        InitSpec::uniform(1.0 / std::sqrt(double(fan_in))), ParamGroup::canon);
    if (cfg.dynamic > 0) {
      CANONLAB_CHECK(groups_ == channels, name + ": model.canon.dynamic=" + std::to_string(cfg.dynamic) +
                                              " needs a depthwise conv, but model.canon.groups=" +
                                              std::to_string(groups_) + " over " + std::to_string(channels) +
                                              " channels");
      dynamic_ = std::make_unique<DynamicCanonMap<T>>(store, name, channels, kernel_, cfg.dynamic);
    }
    if (cfg.norm != "none")
      norm_ = std::make_unique<Norm<T>>(store, name + ".norm", channels, parse_norm_kind(cfg.norm), norm_eps);
  }

  // in: (B, T, C) -> out: (B, T, C). `in` must stay alive until backward.
  void forward(StepContext<T>& ctx, T* out, const T* in, int B, int Tn) {
    const size_t n = size_t(B) * Tn * channels_;
    Backend<T>& be = ctx.backend;
    in_ = in;
    fused_ = be.has_fused_canon() && epilogue().fusion_pays() && !dynamic_;  // the fused op is static
    if (fused_) return forward_fused(ctx, out, in, B, Tn);
    // conv -> act -> norm, each stage kept for backward when it is not the last.
    conv_out_ = ctx.arena.template alloc<T>(n);
    be.canon_conv_forward(conv_out_, in, weight_.value(), B, Tn, channels_, kernel_, groups_);
    if (dynamic_) dynamic_->forward_add(ctx, conv_out_, in, B, Tn);
    const T* branch = conv_out_;
    act_out_ = conv_out_;
    if (activation_ != Activation::none) {
      act_out_ = ctx.arena.template alloc<T>(n);
      if (activation_ == Activation::silu) be.silu_forward(act_out_, conv_out_, n);
      else be.elu_forward(act_out_, conv_out_, n);
      branch = act_out_;
    }
    if (norm_) {
      T* normed = ctx.arena.template alloc<T>(n);
      norm_->forward(ctx, normed, act_out_, B * Tn);
      branch = normed;
    }
    if (residual_) be.add(out, in, branch, n);
    else be.copy(out, branch, n);
    ctx.record(name_, out, n);
  }

  // Decoding one sequence, on the host: cache (K, C) holds the last K inputs, newest last; in_t, out_t: (C).
  std::vector<T> new_cache() const { return std::vector<T>(size_t(kernel_) * channels_, T(0)); }
  void step(T* out_t, std::vector<T>& cache, const T* in_t) const {
    const int C = channels_;
    std::vector<T> branch(C);
    canon_conv_step(branch.data(), cache.data(), in_t, weight_.value(), C, kernel_, groups_);
    if (dynamic_) dynamic_->step_add(branch.data(), cache.data(), in_t);
    if (activation_ == Activation::silu) silu_forward(branch.data(), branch.data(), size_t(C));
    if (activation_ == Activation::elu) elu_forward(branch.data(), branch.data(), size_t(C));
    if (norm_) {
      std::vector<T> normed(C);
      norm_->apply(normed.data(), branch.data(), 1);
      branch = normed;
    }
    for (int c = 0; c < C; c++) out_t[c] = residual_ ? in_t[c] + branch[c] : branch[c];
  }

  // dout: (B, T, C) -> din: (B, T, C) written. Uses ctx.arena for temporaries.
  void backward(StepContext<T>& ctx, T* din, const T* dout, int B, int Tn) {
    if (fused_) return backward_fused(ctx, din, dout, B, Tn);
    const size_t n = size_t(B) * Tn * channels_;
    Backend<T>& be = ctx.backend;
    const T* dbranch = dout;
    if (norm_) {
      T* dact = ctx.arena.template alloc<T>(n);
      norm_->backward(ctx, dact, dbranch, B * Tn);
      dbranch = dact;
    }
    if (activation_ != Activation::none) {
      T* dconv = ctx.arena.template alloc<T>(n);
      if (activation_ == Activation::silu) be.silu_backward(dconv, dbranch, conv_out_, n);
      else be.elu_backward(dconv, dbranch, conv_out_, n);
      dbranch = dconv;
    }
    be.canon_conv_backward(din, weight_.grad(), dbranch, in_, weight_.value(), B, Tn, channels_, kernel_, groups_);
    if (dynamic_) dynamic_->backward_add(ctx, din, dbranch, in_, B, Tn);
    if (residual_) be.add_into(din, dout, n);
  }

 private:
  // The same map in one pass (engine/ops/canon_conv/fused.h), bit for bit; keeps the conv output only when an
  // activation or norm follows it, and the norm's row statistics.
  CanonEpilogue epilogue() const {
    CanonEpilogue ep;
    ep.activation = activation_ == Activation::silu  ? CanonActivation::silu
                    : activation_ == Activation::elu ? CanonActivation::elu
                                                     : CanonActivation::none;
    ep.norm = !norm_                                  ? CanonNorm::none
              : norm_->kind() == NormKind::layernorm ? CanonNorm::layernorm
                                                     : CanonNorm::rmsnorm;
    ep.residual = residual_;
    return ep;
  }
  void forward_fused(StepContext<T>& ctx, T* out, const T* in, int B, int Tn) {
    const size_t n = size_t(B) * Tn * channels_;
    const CanonEpilogue ep = epilogue();
    conv_out_ = ep.saves_conv() ? ctx.arena.template alloc<T>(n) : nullptr;
    rstd_ = norm_ ? ctx.arena.template alloc<T>(size_t(B) * Tn) : nullptr;
    mean_ = ep.norm == CanonNorm::layernorm ? ctx.arena.template alloc<T>(size_t(B) * Tn) : nullptr;
    ctx.backend.canon_fused_forward(out, conv_out_, mean_, rstd_, in, weight_.value(),
                                    norm_ ? norm_->weight_value() : nullptr, norm_ ? norm_->bias_value() : nullptr, B,
                                    Tn, channels_, kernel_, groups_, ep, norm_ ? norm_->eps() : T(0));
    ctx.record(name_, out, n);
  }
  void backward_fused(StepContext<T>& ctx, T* din, const T* dout, int B, int Tn) {
    const CanonEpilogue ep = epilogue();
    const size_t scratch_size = ctx.backend.canon_fused_scratch_size(B, Tn, channels_, kernel_, groups_, ep);
    T* scratch = scratch_size ? ctx.arena.template alloc<T>(scratch_size) : nullptr;
    ctx.backend.canon_fused_backward(din, weight_.grad(), norm_ ? norm_->weight_grad() : nullptr,
                                     norm_ ? norm_->bias_grad() : nullptr, scratch, dout, in_, conv_out_,
                                     weight_.value(), norm_ ? norm_->weight_value() : nullptr, mean_, rstd_, B, Tn,
                                     channels_, kernel_, groups_, ep);
  }

  std::string name_;
  int channels_, kernel_, groups_;
  bool residual_;
  Activation activation_;
  Param<T> weight_;
  std::unique_ptr<DynamicCanonMap<T>> dynamic_;  // null for a static layer
  std::unique_ptr<Norm<T>> norm_;
  const T* in_ = nullptr;
  T* conv_out_ = nullptr;
  T* act_out_ = nullptr;
  // fused path: whether the last forward took it, and the norm's saved row statistics
  bool fused_ = false;
  T* mean_ = nullptr;
  T* rstd_ = nullptr;
};

// The CanonLayer of one cross-layer connection (model.canon.cross_layer, DecoderModel): depthwise, no residual of
// its own (the model adds the branch to block l+1's input).
inline CanonConfig cross_layer_canon_config(const CrossLayerCanonConfig& cross) {
  CanonConfig c;
  c.kernel_size = cross.kernel_size;
  c.residual = false;
  c.activation = cross.activation;
  c.norm = cross.norm;
  return c;
}

}  // namespace canonlab
