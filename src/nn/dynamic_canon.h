#pragma once
// The dynamic part of a dynamic Canon layer (docs/canon-variants.md): a low-rank map from the layer's input x_t
// to an offset Δ_t of the per-channel kernel, so the conv at t uses w_t = W + Δ_t:
//     z_t = V x_t  (R),   Δ_t = U z_t  reshaped (C, K),   conv_t[c] += Σ_i Δ_t[c, i] · x_{t−K+1+i}[c]
// V = dyn_down.weight: (R, C), U = dyn_up.weight: (C·K, R). U starts at zero, so a fresh dynamic layer is the
// static one bit for bit; both draw their init from the store's extra stream range, so the static parameters
// keep the values they have without the map. CanonLayer adds this term to the static conv's output and, in
// backward, its gradients to the static conv's.
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/dynamic_conv/naive.h"
#include "engine/ops/linear/fast.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

template <class T>
class DynamicCanonMap {
 public:
  DynamicCanonMap(ParameterStore<T>& store, const std::string& name, int channels, int kernel, int rank)
      : C_(channels), K_(kernel), R_(rank) {
    // V as PyTorch's Linear default, U(±1/√C); U zero (the zero map)
    down_ = store.add(name + ".dyn_down.weight", {R_, C_}, InitSpec::uniform(1.0 / std::sqrt(double(C_))),
                      ParamGroup::canon, InitStream::extra);
    up_ = store.add(name + ".dyn_up.weight", {int64_t(C_) * K_, R_}, InitSpec::zeros(), ParamGroup::canon,
                    InitStream::extra);
  }

  // conv_out: (B, T, C) the static conv's output, += the dynamic term; in: (B, T, C) kept alive by the caller
  // until backward.
  // Only z (R per token) is kept for backward. Where the backend has the low-rank op (the CPU, in fp32 and double)
  // Δ is formed on the fly and never stored; elsewhere Δ (C·K per token, K times the layer's activations) is a
  // temporary released at once and recomputed from z in backward, one small GEMM, so a dynamic model's forward
  // keeps about what a static one does either way.
  void forward_add(StepContext<T>& ctx, T* conv_out, const T* in, int B, int Tn) {
    const int N = B * Tn;
    Backend<T>& be = ctx.backend;
    z_ = ctx.arena.template alloc<T>(size_t(N) * R_);  // (N, R)
    be.linear_forward(z_, R_, in, C_, down_.gemm_value(), nullptr, N, C_, R_);
    if (lowrank(be)) {
      be.dynamic_conv_lowrank_forward(conv_out, in, z_, up_.value(), B, Tn, C_, K_, R_);
      return;
    }
    const Arena::Mark before_delta = ctx.arena.mark();
    const T* delta = kernel_offsets(ctx, N);
    be.dynamic_conv_forward(conv_out, in, delta, B, Tn, C_, K_);
    ctx.arena.release(before_delta);
  }

  // dconv: (B, T, C) the gradient at the conv output; din: (B, T, C) += the dynamic term's input gradient (through
  // the taps and through V, U); dU, dV accumulated.
  void backward_add(StepContext<T>& ctx, T* din, const T* dconv, const T* in, int B, int Tn) {
    const int N = B * Tn, CK = C_ * K_;
    Backend<T>& be = ctx.backend;
    if (lowrank(be)) {
      T* dz = ctx.arena.template alloc<T>(size_t(N) * R_);      // (N, R)
      T* dx_map = ctx.arena.template alloc<T>(size_t(N) * C_);  // (N, C)
      be.dynamic_conv_lowrank_backward(din, dz, up_.grad(), dconv, in, z_, up_.value(), B, Tn, C_, K_, R_);
      be.linear_backward(dx_map, C_, down_.grad(), nullptr, dz, R_, in, C_, down_.gemm_value(), N, C_, R_);
      be.add_into(din, dx_map, size_t(N) * C_);
      return;
    }
    const T* delta = kernel_offsets(ctx, N);                  // (N, C, K), as in forward
    T* ddelta = ctx.arena.template alloc<T>(size_t(N) * CK);  // (N, C, K)
    T* dz = ctx.arena.template alloc<T>(size_t(N) * R_);      // (N, R)
    T* dx_map = ctx.arena.template alloc<T>(size_t(N) * C_);  // (N, C)
    be.dynamic_conv_backward(din, ddelta, dconv, in, delta, B, Tn, C_, K_);
    be.linear_backward(dz, R_, up_.grad(), nullptr, ddelta, CK, z_, R_, up_.gemm_value(), N, R_, CK);
    be.linear_backward(dx_map, C_, down_.grad(), nullptr, dz, R_, in, C_, down_.gemm_value(), N, C_, R_);
    be.add_into(din, dx_map, size_t(N) * C_);
  }

  // Decoding on the host: out_t (C) += the dynamic term of the token in_t (C), window (K, C) its conv window
  // (oldest first, in_t last), as canon_conv_step left it.
  void step_add(T* out_t, const T* window, const T* in_t) const {
    std::vector<T> z(R_), delta(size_t(C_) * K_);
    canonlab::linear_forward(z.data(), R_, in_t, C_, down_.value(), static_cast<const T*>(nullptr), 1, C_, R_);
    canonlab::linear_forward(delta.data(), C_ * K_, z.data(), R_, up_.value(), static_cast<const T*>(nullptr), 1, R_,
                             C_ * K_);
    dynamic_conv_step(out_t, window, delta.data(), C_, K_);
  }

  int rank() const { return R_; }

 private:
  // In bf16 precision the GEMM path rounds z and U to bf16 as every linear layer does; the low-rank op is fp32 only.
  static bool lowrank(const Backend<T>& be) {
    return be.has_lowrank_dynamic_conv() && be.precision() == Precision::fp32;
  }

  // Δ = z Uᵀ: (N, C·K) in the arena, from the z of the last forward
  const T* kernel_offsets(StepContext<T>& ctx, int N) const {
    T* delta = ctx.arena.template alloc<T>(size_t(N) * C_ * K_);
    ctx.backend.linear_forward(delta, C_ * K_, z_, R_, up_.gemm_value(), nullptr, N, R_, C_ * K_);
    return delta;
  }

  int C_, K_, R_;
  Param<T> down_, up_;  // V: (R, C), U: (C·K, R)
  T* z_ = nullptr;  // (N, R), forward to backward
};

}  // namespace canonlab
