#pragma once
// Canon layer (Physics of LMs 4.1): a causal 1-D convolution over time that mixes each position with its
// K-1 predecessors.  out = [h +] norm(act(conv(h)))
// Defaults follow the paper: depthwise, kernel 4, no bias, residual, no activation, PyTorch-default init
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) rather than normal(0.02) — the O(1) init is what makes it help.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/naive.h"
#include "engine/params.h"
#include "nn/context.h"
#include "nn/norm.h"

namespace canonlab {

enum class Activation { none, silu, elu };

template <class T>
class CanonLayer {
 public:
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
    if (cfg.norm != "none")
      norm_ = std::make_unique<Norm<T>>(store, name + ".norm", channels, parse_norm_kind(cfg.norm), norm_eps);
  }

  // in: (B, T, C) -> out: (B, T, C). `in` must stay alive until backward.
  void forward(StepContext<T>& ctx, T* out, const T* in, int B, int Tn) {
    const size_t n = size_t(B) * Tn * channels_;
    Backend<T>& be = ctx.backend;
    in_ = in;
    // conv -> act -> norm, each stage kept for backward when it is not the last.
    conv_out_ = ctx.arena.template alloc<T>(n);
    be.canon_conv_forward(conv_out_, in, weight_.value(), B, Tn, channels_, kernel_, groups_);
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
    if (residual_) be.add_into(din, dout, n);
  }

 private:
  std::string name_;
  int channels_, kernel_, groups_;
  bool residual_;
  Activation activation_;
  Param<T> weight_;
  std::unique_ptr<Norm<T>> norm_;
  const T* in_ = nullptr;
  T* conv_out_ = nullptr;
  T* act_out_ = nullptr;
};

}  // namespace canonlab
