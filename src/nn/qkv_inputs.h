#pragma once
// The input side shared by GLA, Gated DeltaNet and DeltaNet:
//   [q | k | v] = [q_proj(x) | k_proj(x) | v_proj(x)]          one GEMM over the contiguous weights
//   with b:     q, k, v = silu(q_conv(q)), silu(k_conv(k)), silu(v_conv(v))   (the family's own conv, Canon-b)
//   without b:  unchanged (GLA) or silu(q), silu(k), silu(v) (GDN, DeltaNet: silu_without_conv)
//   with B:     [q | k | v] = CanonB([q | k | v])
// The result is one (B, T, Kd + Kd + Vd) buffer; the mixer reads its column blocks.
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/linear/fast.h"
#include "nn/canon.h"
#include "nn/linear.h"
#include "nn/mixer.h"
#include "nn/short_conv.h"

namespace canonlab {

template <class T>
class QkvInputs {
 public:
  void needs(std::vector<OpNeed>& out) const {
    if (canon_b_) canon_b_->needs(out);
  }

  QkvInputs(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg, int key_width, int value_width,
            bool silu_without_conv)
      : C_(cfg.d_model), Kd_(key_width), Vd_(value_width), W_(2 * key_width + value_width),
        silu_without_conv_(silu_without_conv) {
    q_proj_ = std::make_unique<Linear<T>>(store, name + ".q_proj", C_, Kd_, false, cfg.init_std);
    k_proj_ = std::make_unique<Linear<T>>(store, name + ".k_proj", C_, Kd_, false, cfg.init_std);
    v_proj_ = std::make_unique<Linear<T>>(store, name + ".v_proj", C_, Vd_, false, cfg.init_std);
    if (cfg.canon.set.find('b') != std::string::npos) {
      const int K = cfg.recurrent.conv_kernel;
      const InitSpec init = InitSpec::normal(cfg.init_std);
      convs_.push_back(std::make_unique<ShortConv<T>>(store, name + ".q_conv", Kd_, K, false, true, init, init));
      convs_.push_back(std::make_unique<ShortConv<T>>(store, name + ".k_conv", Kd_, K, false, true, init, init));
      convs_.push_back(std::make_unique<ShortConv<T>>(store, name + ".v_conv", Vd_, K, false, true, init, init));
    }
    if (cfg.canon.set.find('B') != std::string::npos)
      canon_b_ = std::make_unique<CanonLayer<T>>(store, name + ".canon_b", W_, cfg.canon, cfg.norm_eps);
  }

  int width() const { return W_; }
  int key_width() const { return Kd_; }
  int value_width() const { return Vd_; }

  // x: (B, T, C) -> returns [q | k | v]: (B, T, W) in the arena. x must stay alive until backward.
  const T* forward(StepContext<T>& ctx, const T* x, int B, int Tn) {
    const size_t N = size_t(B) * Tn, n = N * W_;
    x_ = x;
    proj_ = ctx.arena.template alloc<T>(n);
    check_contiguous();
    gemm_weight_forward(ctx.backend, proj_, W_, x, C_, q_proj_->weight(), static_cast<const T*>(nullptr), int(N), C_,
                        W_);
    mixed_ = proj_;
    if (!convs_.empty()) {
      mixed_ = ctx.arena.template alloc<T>(n);
      for (int i = 0; i < 3; i++) convs_[i]->forward(ctx, mixed_ + offset(i), W_, proj_ + offset(i), W_, B, Tn);
    } else if (silu_without_conv_) {
      mixed_ = ctx.arena.template alloc<T>(n);
      ctx.backend.silu_forward(mixed_, proj_, n);
    }
    out_ = mixed_;
    if (canon_b_) {
      out_ = ctx.arena.template alloc<T>(n);
      canon_b_->forward(ctx, out_, mixed_, B, Tn);
    }
    return out_;
  }

  // dqkv: (B, T, W) -> dx: (B, T, C) written.
  void backward(StepContext<T>& ctx, T* dx, const T* dqkv, int B, int Tn) {
    const size_t N = size_t(B) * Tn, n = N * W_;
    const T* dmixed = dqkv;
    if (canon_b_) {
      T* d = ctx.arena.template alloc<T>(n);
      canon_b_->backward(ctx, d, dqkv, B, Tn);
      dmixed = d;
    }
    const T* dproj = dmixed;
    if (!convs_.empty()) {
      T* d = ctx.arena.template alloc<T>(n);
      for (int i = 0; i < 3; i++) convs_[i]->backward(ctx, d + offset(i), W_, dmixed + offset(i), W_, B, Tn);
      dproj = d;
    } else if (silu_without_conv_) {
      T* d = ctx.arena.template alloc<T>(n);
      ctx.backend.silu_backward(d, dmixed, proj_, n);
      dproj = d;
    }
    ctx.backend.linear_backward(dx, C_, q_proj_->weight().grad(), static_cast<T*>(nullptr), dproj, W_, x_, C_,
                                q_proj_->weight().gemm_value(), int(N), C_, W_);
  }

  // Decoding state of one sequence: the conv caches and the Canon-B cache.
  struct Cache {
    std::vector<std::vector<T>> conv;
    std::vector<T> canon_b;
  };
  Cache new_cache() const {
    Cache c;
    for (const auto& conv : convs_) c.conv.push_back(conv->new_cache());
    if (canon_b_) c.canon_b = canon_b_->new_cache();
    return c;
  }
  // x_t: (C) -> qkv_t: (W), on the host
  void step(T* qkv_t, Cache& cache, const T* x_t) const {
    std::vector<T> proj(W_);
    check_contiguous();
    gemm_weight_apply(proj.data(), W_, x_t, C_, q_proj_->weight(), static_cast<const T*>(nullptr), 1, C_, W_);
    std::vector<T> mixed = proj;
    if (!convs_.empty()) {
      for (int i = 0; i < 3; i++) convs_[i]->step(mixed.data() + offset(i), cache.conv[i], proj.data() + offset(i));
    } else if (silu_without_conv_) {
      silu_forward(mixed.data(), proj.data(), size_t(W_));
    }
    if (canon_b_) canon_b_->step(qkv_t, cache.canon_b, mixed.data());
    else std::copy(mixed.begin(), mixed.end(), qkv_t);
  }

 private:
  int offset(int i) const { return i == 0 ? 0 : i == 1 ? Kd_ : 2 * Kd_; }
  // q, k, v weights are registered back to back: one (W, C) GEMM.
  void check_contiguous() const {
    CANONLAB_CHECK(q_proj_->followed_in_memory_by(*k_proj_) && k_proj_->followed_in_memory_by(*v_proj_),
                   "q/k/v projections are not contiguous");
  }

  int C_, Kd_, Vd_, W_;
  bool silu_without_conv_;
  std::unique_ptr<Linear<T>> q_proj_, k_proj_, v_proj_;
  std::vector<std::unique_ptr<ShortConv<T>>> convs_;
  std::unique_ptr<CanonLayer<T>> canon_b_;
  const T* x_ = nullptr;
  T* proj_ = nullptr;
  T* mixed_ = nullptr;
  T* out_ = nullptr;
};

// Decoding state of a mixer built on QkvInputs (GLA, Gated DeltaNet, DeltaNet): per sequence the input caches,
// and the recurrent states S: (B, H, K, V).
template <class T>
struct LinearAttentionDecodeState final : MixerDecodeState {
  std::vector<typename QkvInputs<T>::Cache> inputs;
  std::vector<T> S;
  LinearAttentionDecodeState(const QkvInputs<T>& qkv, int B, size_t state_per_sequence)
      : S(size_t(B) * state_per_sequence, T(0)) {
    for (int b = 0; b < B; b++) inputs.push_back(qkv.new_cache());
  }
};

}  // namespace canonlab
