#pragma once
// The short causal convolution built into the linear-time families ("conv1d", the paper's Canon-b):
//   y = act(depthwise_conv(x) + bias)
// Unlike a Canon layer it has no residual link, its activation is SiLU and its init is the family's (normal(0.02)
// in GLA and GDN, PyTorch's Conv1d default with a bias in Mamba2). Without a weight (the paper's "noconv1d"
// ablation) the owner simply skips it.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/naive.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

template <class T>
class ShortConv {
 public:
  ShortConv(ParameterStore<T>& store, const std::string& name, int channels, int kernel, bool bias, bool silu,
            InitSpec weight_init, InitSpec bias_init)
      : name_(name), C_(channels), K_(kernel), silu_(silu) {
    weight_ = store.add(name + ".weight", {channels, 1, kernel}, weight_init, ParamGroup::canon);
    if (bias) {
      bias_ = store.add(name + ".bias", {channels}, bias_init, ParamGroup::bias);
      has_bias_ = true;
    }
  }

  // x: (B, T, C) rows of stride ldx -> y: (B, T, C) rows of stride ldy (may be a column block of a wider
  // buffer). x is copied, so it need not stay alive.
  void forward(StepContext<T>& ctx, T* y, int ldy, const T* x, int ldx, int B, int Tn) {
    const int N = B * Tn;
    const size_t n = size_t(N) * C_;
    Backend<T>& be = ctx.backend;
    in_ = ctx.arena.template alloc<T>(n);
    be.copy_rows(in_, C_, x, ldx, N, C_);
    pre_ = ctx.arena.template alloc<T>(n);
    be.canon_conv_forward(pre_, in_, weight_.value(), B, Tn, C_, K_, C_);
    be.short_conv_bias_act_forward(y, ldy, pre_, has_bias_ ? bias_.value() : nullptr, N, C_, silu_);
  }

  // dy: (B, T, C) rows of stride lddy -> dx: (B, T, C) rows of stride lddx, written.
  void backward(StepContext<T>& ctx, T* dx, int lddx, const T* dy, int lddy, int B, int Tn) {
    const int N = B * Tn;
    const size_t n = size_t(N) * C_;
    Backend<T>& be = ctx.backend;
    T* dpre = ctx.arena.template alloc<T>(n);
    be.short_conv_act_backward(dpre, dy, lddy, pre_, N, C_, silu_);
    if (has_bias_) be.short_conv_bias_backward(bias_.grad(), dpre, N, C_);
    T* dx_contig = lddx == C_ ? dx : ctx.arena.template alloc<T>(n);
    be.canon_conv_backward(dx_contig, weight_.grad(), dpre, in_, weight_.value(), B, Tn, C_, K_, C_);
    if (dx_contig != dx) be.copy_rows(dx, lddx, dx_contig, C_, N, C_);
  }

  // Decoding on the host: cache (K, C) holds the last K raw inputs of one sequence, newest last; x_t, y_t: (C).
  std::vector<T> new_cache() const { return std::vector<T>(size_t(K_) * C_, T(0)); }
  void step(T* y_t, std::vector<T>& cache, const T* x_t) const {
    canon_conv_step(y_t, cache.data(), x_t, weight_.value(), C_, K_, C_);
    for (int c = 0; c < C_; c++) {
      const T v = has_bias_ ? y_t[c] + bias_.value()[c] : y_t[c];
      y_t[c] = silu_ ? v * sigmoid(v) : v;  // as forward
    }
  }

  const Param<T>& weight() const { return weight_; }
  const Param<T>& bias() const { return bias_; }
  bool has_bias() const { return has_bias_; }
  int channels() const { return C_; }

 private:
  std::string name_;
  int C_, K_;
  bool silu_;
  bool has_bias_ = false;
  Param<T> weight_, bias_;
  T* in_ = nullptr;
  T* pre_ = nullptr;
};

}  // namespace canonlab
