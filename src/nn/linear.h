#pragma once
// y = x W^T + b, with W in PyTorch layout (out, in). Stateless between forward and backward: the caller
// passes x again, so fused buffers (q|k|v columns) can be fed in with row strides. The GEMM reads the weight's
// gemm_value() (the bf16 shadow under bf16 precision); the gradient goes to the fp32 master.
#include <optional>
#include <string>

#include "engine/ops/linear/fast.h"
#include "engine/params.h"
#include "nn/context.h"

namespace canonlab {

template <class T>
class Linear {
 public:
  Linear(ParameterStore<T>& store, const std::string& name, int in, int out, bool bias, double init_std,
         ParamGroup group = ParamGroup::linear)
      : in_(in), out_(out) {
    weight_ = store.add(name + ".weight", {out, in}, InitSpec::normal(init_std), group);
    if (bias) bias_ = store.add(name + ".bias", {out}, InitSpec::zeros(), ParamGroup::bias);
  }

  // x: (N, in) rows of stride ldx -> y: (N, out) rows of stride ldy
  void forward(Backend<T>& backend, T* y, int ldy, const T* x, int ldx, int N) const {
    backend.linear_forward(y, ldy, x, ldx, weight_.gemm_value(), bias_ ? bias_->value() : nullptr, N, in_, out_);
  }
  // dy: (N, out) -> dx: (N, in) written (skipped when dx is null); dW, db accumulate.
  void backward(Backend<T>& backend, T* dx, int lddx, const T* dy, int lddy, const T* x, int ldx, int N) const {
    backend.linear_backward(dx, lddx, weight_.grad(), bias_ ? bias_->grad() : nullptr, dy, lddy, x, ldx,
                            weight_.gemm_value(), N, in_, out_);
  }

  // Token-by-token decoding (SequenceMixer::decode_step) runs on the host with the fp32 weights: host memory only.
  void apply(T* y, int ldy, const T* x, int ldx, int N) const {
    canonlab::linear_forward(y, ldy, x, ldx, weight_.value(), bias_ ? bias_->value() : nullptr, N, in_, out_);
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
