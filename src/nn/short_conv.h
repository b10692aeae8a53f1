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
#include "engine/ops/canon_conv/fast.h"
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
    const size_t N = size_t(B) * Tn, n = N * C_;
    const int C = C_;
    in_ = ctx.arena.template alloc<T>(n);
    T* in = in_;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < N; r++) std::copy(x + r * ldx, x + r * ldx + C, in + r * C);
    pre_ = ctx.arena.template alloc<T>(n);
    T* pre = pre_;
    canon_conv_forward(pre, in, weight_.value(), B, Tn, C, K_, C);
    // bias and activation, one row at a time (y may be a column block of a wider buffer); the same
    // arithmetic as silu_forward
    const T* b = has_bias_ ? bias_.value() : nullptr;
    const bool silu = silu_;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < N; r++) {
      T* p = pre + r * C;
      T* yr = y + r * ldy;
      if (b)
        for (int c = 0; c < C; c++) p[c] += b[c];
      if (silu)
        for (int c = 0; c < C; c++) yr[c] = p[c] * sigmoid(p[c]);
      else
        std::copy(p, p + C, yr);
    }
  }

  // dy: (B, T, C) rows of stride lddy -> dx: (B, T, C) rows of stride lddx, written.
  void backward(StepContext<T>& ctx, T* dx, int lddx, const T* dy, int lddy, int B, int Tn) {
    const size_t N = size_t(B) * Tn, n = N * C_;
    const int C = C_;
    T* d = ctx.arena.template alloc<T>(n);
    const T* pre = pre_;
    const bool silu = silu_;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < N; r++) {
      const T* dyr = dy + r * lddy;
      T* dr = d + r * C;
      if (silu) {
        const T* p = pre + r * C;
        for (int c = 0; c < C; c++) {  // the arithmetic of silu_backward
          const T s = sigmoid(p[c]);
          dr[c] = dyr[c] * s * (T(1) + p[c] * (T(1) - s));
        }
      } else {
        std::copy(dyr, dyr + C, dr);
      }
    }
    const T* dpre = d;
    if (has_bias_) {
      // Each channel is summed over the rows in order by one thread (the same bits for any thread count);
      // a block of kBiasBlock channels per work item keeps the row reads contiguous.
      constexpr int kBiasBlock = 16;
      T* db = bias_.grad();
      const int nblk = (C + kBiasBlock - 1) / kBiasBlock;
#pragma omp parallel for schedule(static)
      for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * kBiasBlock, cb = std::min(kBiasBlock, C - c0);
        double acc[kBiasBlock] = {};
        for (size_t r = 0; r < N; r++) {
          const T* row = dpre + r * C + c0;
          for (int j = 0; j < cb; j++) acc[j] += double(row[j]);
        }
        for (int j = 0; j < cb; j++) db[c0 + j] += T(acc[j]);
      }
    }
    T* dx_contig = lddx == C ? dx : ctx.arena.template alloc<T>(n);
    canon_conv_backward(dx_contig, weight_.grad(), dpre, in_, weight_.value(), B, Tn, C, K_, C);
    if (dx_contig != dx) {
#pragma omp parallel for schedule(static)
      for (size_t r = 0; r < N; r++) std::copy(dx_contig + r * C, dx_contig + (r + 1) * C, dx + r * lddx);
    }
  }

  // Decoding: cache (K, C) holds the last K raw inputs of one sequence, newest last; x_t, y_t: (C).
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
