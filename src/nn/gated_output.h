#pragma once
// The output side shared by GLA, Gated DeltaNet and DeltaNet:
//   y = o_proj( rmsnorm_per_head(o) ⊙ o_norm.weight ⊙ silu(g_proj(x)) )     (no silu factor without output_gate)
// The norm comes before the gate (fla's FusedRMSNormGated); the norm weight (head_v) is shared by the heads.
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "nn/context.h"
#include "nn/linear.h"

namespace canonlab {

template <class T>
class GatedOutput {
 public:
  GatedOutput(ParameterStore<T>& store, const std::string& name, const ModelConfig& cfg, int value_width, int heads,
              bool output_gate)
      : C_(cfg.d_model), Vd_(value_width), H_(heads), V_(value_width / heads), eps_(T(cfg.norm_eps)) {
    if (output_gate) g_proj_ = std::make_unique<Linear<T>>(store, name + ".g_proj", C_, Vd_, false, cfg.init_std);
    norm_w_ = store.add(name + ".o_norm.weight", {V_}, InitSpec::ones(), ParamGroup::norm);
    o_proj_ = std::make_unique<Linear<T>>(store, name + ".o_proj", Vd_, C_, false, cfg.init_std);
  }

  // o: (N, Vd) heads of V, x: (N, C) the mixer input (for the gate) -> y: (N, C). o and x stay alive until backward.
  void forward(StepContext<T>& ctx, T* y, const T* o, const T* x, int N) {
    Backend<T>& be = ctx.backend;
    o_ = o;
    x_ = x;
    gate_ = nullptr;
    if (g_proj_) {
      gate_ = ctx.arena.template alloc<T>(size_t(N) * Vd_);
      g_proj_->forward(be, gate_, Vd_, x, C_, N);
    }
    rstd_ = ctx.arena.template alloc<T>(size_t(N) * H_);
    normed_ = ctx.arena.template alloc<T>(size_t(N) * Vd_);
    be.gated_rmsnorm_forward(normed_, rstd_, o, gate_, norm_w_.value(), N, H_, V_, V_, eps_, GateOrder::norm_then_gate);
    o_proj_->forward(be, y, C_, normed_, Vd_, N);
  }

  // dy: (N, C) -> do_: (N, Vd) written; the gate's gradient is ADDED to dx: (N, C).
  void backward(StepContext<T>& ctx, T* do_, T* dx, const T* dy, int N) {
    Backend<T>& be = ctx.backend;
    T* dnormed = ctx.arena.template alloc<T>(size_t(N) * Vd_);
    o_proj_->backward(be, dnormed, Vd_, dy, C_, normed_, Vd_, N);
    T* dgate = g_proj_ ? ctx.arena.template alloc<T>(size_t(N) * Vd_) : nullptr;
    be.gated_rmsnorm_backward(do_, dgate, norm_w_.grad(), dnormed, o_, gate_, norm_w_.value(), rstd_, N, H_, V_, V_,
                              GateOrder::norm_then_gate);
    if (g_proj_) {
      T* dtmp = ctx.arena.template alloc<T>(size_t(N) * C_);
      g_proj_->backward(be, dtmp, C_, dgate, Vd_, x_, C_, N);
      be.add_into(dx, dtmp, size_t(N) * C_);
    }
  }

  // Decoding on the host, N rows at once without saving: o: (N, Vd), x: (N, C) -> y: (N, C).
  void apply(T* y, const T* o, const T* x, int N) const {
    std::vector<T> gate(g_proj_ ? size_t(N) * Vd_ : 0), rstd(size_t(N) * H_), normed(size_t(N) * Vd_);
    if (g_proj_) g_proj_->apply(gate.data(), Vd_, x, C_, N);
    canonlab::gated_rmsnorm_forward(normed.data(), rstd.data(), o, g_proj_ ? gate.data() : static_cast<const T*>(nullptr),
                                    norm_w_.value(), N, H_, V_, V_, eps_, GateOrder::norm_then_gate);
    o_proj_->apply(y, C_, normed.data(), Vd_, N);
  }

 private:
  int C_, Vd_, H_, V_;
  T eps_;
  std::unique_ptr<Linear<T>> g_proj_, o_proj_;
  Param<T> norm_w_;
  const T* o_ = nullptr;
  const T* x_ = nullptr;
  T* gate_ = nullptr;
  T* rstd_ = nullptr;
  T* normed_ = nullptr;
};

}  // namespace canonlab
