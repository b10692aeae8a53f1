#pragma once
// y = x W^T + b, with W in PyTorch layout (out, in). Stateless between forward and backward: the caller
// passes x again, so fused buffers (q|k|v columns) can be fed in with row strides. The GEMM reads the weight's
// gemm_value() (the bf16 shadow under bf16 precision), or the store's int8 copy after quantize_int8() (canonlab
// eval / generate --int8); the gradient goes to the fp32 master.
#include <optional>
#include <string>

#include "engine/ops/int8_linear/fast.h"
#include "engine/ops/linear/fast.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

// y = x Wᵀ + b for a GEMM whose weight starts at `w` and spans OUT rows of IN (one weight, or several registered
// back to back for a fused q|k|v or gate|up GEMM). Every forward GEMM goes through one of these two, so that int8
// inference reaches all of them: the int8 kernel where the store holds an int8 copy, else the fp32 (or bf16) GEMM.
// x: (N, IN) rows of stride ldx -> y: (N, OUT) rows of stride ldy; b: (OUT) or nullptr
template <class T>
void gemm_weight_forward(Backend<T>& backend, T* y, int ldy, const T* x, int ldx, const Param<T>& w, const T* b, int N,
                         int IN, int OUT) {
  if (const Int8Block q = w.int8_block(OUT, IN))
    return backend.linear_forward_int8(y, ldy, x, ldx, q.q, q.scale, b, N, IN, OUT);
  backend.linear_forward(y, ldy, x, ldx, w.gemm_value(), b, N, IN, OUT);
}
// The same on the host with the fp32 values (or the int8 copy): the token-by-token decode step.
template <class T>
void gemm_weight_apply(T* y, int ldy, const T* x, int ldx, const Param<T>& w, const T* b, int N, int IN, int OUT) {
  if (const Int8Block q = w.int8_block(OUT, IN))
    return canonlab::int8_linear_forward(y, ldy, x, ldx, q.q, q.scale, b, N, IN, OUT);
  canonlab::linear_forward(y, ldy, x, ldx, w.value(), b, N, IN, OUT);
}

template <class T>
class Linear {
 public:
  Linear(ParameterStore<T>& store, const std::string& name, int in, int out, bool bias, double init_std,
         ParamGroup group = ParamGroup::linear)
      : in_(in), out_(out) {
    weight_ = store.add(name + ".weight", {out, in}, InitSpec::normal(init_std), group);
    store.mark_gemm_weight(weight_);
    if (bias) bias_ = store.add(name + ".bias", {out}, InitSpec::zeros(), ParamGroup::bias);
  }

  // x: (N, in) rows of stride ldx -> y: (N, out) rows of stride ldy
  void forward(Backend<T>& backend, T* y, int ldy, const T* x, int ldx, int N) const {
    gemm_weight_forward(backend, y, ldy, x, ldx, weight_, bias_ ? bias_->value() : nullptr, N, in_, out_);
  }
  // dy: (N, out) -> dx: (N, in) written (skipped when dx is null); dW, db accumulate.
  void backward(Backend<T>& backend, T* dx, int lddx, const T* dy, int lddy, const T* x, int ldx, int N) const {
    backend.linear_backward(dx, lddx, weight_.grad(), bias_ ? bias_->grad() : nullptr, dy, lddy, x, ldx,
                            weight_.gemm_value(), N, in_, out_);
  }

  // Token-by-token decoding (SequenceMixer::decode_step) runs on the host with the fp32 weights (or their int8
  // copy): host memory only.
  void apply(T* y, int ldy, const T* x, int ldx, int N) const {
    gemm_weight_apply(y, ldy, x, ldx, weight_, bias_ ? bias_->value() : nullptr, N, in_, out_);
  }

  // Projections registered one after another without biases share one (sum of outs, in) weight block, so
  // they can run as a single wider GEMM (q|k|v, gate|up). True when `next` directly follows this one.
  bool followed_in_memory_by(const Linear& next) const {
    return !bias_ && !next.bias_ && in_ == next.in_ && weight_.value() + size_t(out_) * in_ == next.weight_.value();
  }
  bool has_bias() const { return bias_.has_value(); }

  int in_features() const { return in_; }
  int out_features() const { return out_; }
  const Param<T>& weight() const { return weight_; }

 private:
  int in_, out_;
  Param<T> weight_;
  std::optional<Param<T>> bias_;
};

}  // namespace canonlab
