#pragma once
// The int8 copy of a model's GEMM weights (canonlab eval / generate --int8; docs/engine.md "int8 inference"). Every
// parameter registered as a GEMM weight (ParamInfo::gemm_weight: each Linear's (out, in) weight and the tied
// embedding as the output head) is quantized per output row (engine/ops/int8_linear/quantize.h). The int8 values
// and the scales are packed in parameter order, so weights that follow each other in the fp32 buffer (q|k|v,
// gate|up) follow each other here too, and a fused GEMM over them reads one (sum of outs, in) block.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/ops/int8_linear/quantize.h"

namespace canonlab {

// One GEMM's int8 weights: q (OUT, IN) and scale (OUT); null where the weight is not quantized.
struct Int8Block {
  const int8_t* q = nullptr;
  const float* scale = nullptr;
  explicit operator bool() const { return q != nullptr; }
};

class Int8Weights {
 public:
  bool empty() const { return has_.empty(); }
  size_t quantized_tensors() const { return tensors_; }
  size_t quantized_elements() const { return q_.size(); }
  size_t bytes() const { return q_.size() + scale_.size() * sizeof(float); }

  // values: the store's flat values (host memory). Refuses non-finite weights, naming the tensor.
  template <class Info, class T>
  void build(const std::vector<Info>& infos, const T* values) {
    *this = Int8Weights();
    has_.assign(infos.size(), 0);
    q_at_.assign(infos.size(), 0);
    scale_at_.assign(infos.size(), 0);
    size_t nq = 0, ns = 0;
    for (const Info& p : infos)
      if (p.gemm_weight) nq += p.numel, ns += size_t(p.shape[0]);
    q_.resize(nq);
    scale_.resize(ns);
    nq = ns = 0;
    for (size_t id = 0; id < infos.size(); id++) {
      const Info& p = infos[id];
      if (!p.gemm_weight) continue;
      CANONLAB_CHECK(p.shape.size() == 2, "int8: '" + p.name + "' is not a matrix");
      const T* w = values + p.offset;
      for (size_t e = 0; e < p.numel; e++)
        if (!std::isfinite(double(w[e])))
          throw Error("int8: parameter '" + p.name + "' holds a non-finite value; it cannot be quantized");
      const int OUT = int(p.shape[0]), IN = int(p.shape[1]);
      quantize_int8_rows(q_.data() + nq, scale_.data() + ns, w, OUT, IN);
      has_[id] = 1;
      q_at_[id] = nq;
      scale_at_[id] = ns;
      nq += p.numel;
      ns += size_t(OUT);
      tensors_++;
    }
  }

  // The int8 block of a GEMM whose fp32 weight starts at parameter `id` and spans OUT rows of IN (one parameter,
  // or several registered back to back for a fused GEMM). Empty where `id` is not quantized; an error where only
  // part of the span is (the fused GEMM would mix fp32 and int8 weights).
  template <class Info>
  Int8Block block(const std::vector<Info>& infos, size_t id, int OUT, int IN) const {
    if (empty() || !has_[id]) return {};
    size_t covered = 0;
    for (size_t j = id; covered < size_t(OUT) * IN; j++) {
      CANONLAB_CHECK(j < infos.size() && has_[j] && infos[j].shape.size() == 2 && infos[j].shape[1] == IN,
                     "int8: the (" + std::to_string(OUT) + ", " + std::to_string(IN) + ") GEMM starting at '" +
                         infos[id].name + "' spans weights that are not all quantized");
      covered += infos[j].numel;
    }
    CANONLAB_CHECK(covered == size_t(OUT) * IN, "int8: the GEMM starting at '" + infos[id].name +
                                                    "' ends inside a weight");
    return {q_.data() + q_at_[id], scale_.data() + scale_at_[id]};
  }

 private:
  std::vector<int8_t> q_;
  std::vector<float> scale_;
  std::vector<size_t> q_at_, scale_at_;  // per parameter id, where its values / scales start
  std::vector<char> has_;                // per parameter id: quantized
  size_t tensors_ = 0;
};

}  // namespace canonlab
