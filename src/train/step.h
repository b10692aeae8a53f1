#pragma once
// One training step, shared by the trainer, `debug-dump` and `bench-step`:
//   forward_backward: zero grads -> forward -> masked loss -> (non-finite check) -> backward
//   apply_update:     global grad norm -> (non-finite check) -> clip -> AdamW
#include <cmath>
#include <string>

#include "data/task.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/loss.h"

namespace canonlab {

struct ForwardBackwardResult {
  double loss = 0;
  const float* logits = nullptr;  // (B, T, V), valid until the arena is reset
};

namespace step_detail {
inline std::string first_non_finite_output(const ActivationTrace<float>& trace) {
  for (const auto& e : trace.entries)
    for (size_t i = 0; i < e.count; i++)
      if (!std::isfinite(e.data[i])) return *e.module;
  return "";
}
inline std::string first_non_finite(std::span<const float> values, const ParameterStore<float>& params) {
  for (const ParamInfo& p : params.infos())
    for (size_t i = 0; i < p.numel; i++)
      if (!std::isfinite(values[p.offset + i])) return p.name;
  return "";
}
}  // namespace step_detail

// Resets the arena, computes the loss of `batch` and accumulates fresh gradients. A non-finite loss stops
// with the step and the first non-finite parameter or module output (in forward order).
inline ForwardBackwardResult forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                              const Batch& batch, int step) {
  arena.reset();
  trace.entries.clear();
  StepContext<float> ctx{arena};
  ctx.trace = &trace;
  ParameterStore<float>& params = model.params();
  params.zero_grad();
  const int N = batch.B * batch.T;
  const float* logits = model.forward(ctx, batch.tokens.data(), batch.B, batch.T);
  LossResult<float> loss =
      masked_cross_entropy(arena, logits, batch.targets.data(), batch.loss_mask.data(), N, model.vocab_size(), true);
  if (!std::isfinite(loss.loss)) {
    std::string where = step_detail::first_non_finite(params.values(), params);
    where = where.empty() ? step_detail::first_non_finite_output(trace) : "parameter " + where;
    throw Error("training stopped: loss is " + std::to_string(loss.loss) + " at step " + std::to_string(step) +
                "; first non-finite output: " + (where.empty() ? "cross-entropy (all module outputs finite)" : where) +
                ". Lower train.lr, enable train.grad_clip, or check the data.");
  }
  model.backward(ctx, loss.dlogits, batch.B, batch.T);
  return {loss.loss, logits};
}

// Clips the gradients to train.grad_clip and applies one AdamW update at learning rate lr; returns the
// gradient norm before clipping. A non-finite gradient stops with the first parameter whose gradient is.
inline double apply_update(ParameterStore<float>& params, AdamWState& opt, const std::vector<uint8_t>& decay,
                           const TrainConfig& tc, double lr, int step) {
  const double norm = grad_global_norm<float>(params.grads());
  if (!std::isfinite(norm))
    throw Error("training stopped: gradient norm is " + std::to_string(norm) + " at step " + std::to_string(step) +
                "; first non-finite gradient: " + step_detail::first_non_finite(params.grads(), params));
  clip_grad_norm<float>(params.grads(), norm, tc.grad_clip);
  adamw_step<float>(params.values(), params.grads(), opt, decay, tc, lr);
  return norm;
}

}  // namespace canonlab
