#pragma once
// One training step, shared by the trainer, `debug-dump` and `bench-step`:
//   forward_backward: upload the batch -> zero grads -> forward -> masked loss -> (non-finite check) -> backward
//   apply_update:     global grad norm -> (non-finite check) -> clip -> AdamW
// Everything runs on the model's backend; only the loss and the gradient norm come back to the host.
#include <cmath>
#include <string>

#include "data/task.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/loss.h"

namespace canonlab {

struct ForwardBackwardResult {
  double loss = 0;
  const float* logits = nullptr;  // (B, T, V) in the arena (device memory), valid until the arena is reset
};

namespace step_detail {
inline std::string first_non_finite_output(Backend<float>& backend, const ActivationTrace<float>& trace) {
  for (const auto& e : trace.entries)
    if (backend.first_non_finite(e.data, e.count) < e.count) return *e.module;
  return "";
}
inline std::string first_non_finite(Backend<float>& backend, std::span<const float> values,
                                    const ParameterStore<float>& params) {
  for (const ParamInfo& p : params.infos())
    if (backend.first_non_finite(values.data() + p.offset, p.numel) < p.numel) return p.name;
  return "";
}
}  // namespace step_detail

// Resets the arena, uploads `batch`, computes its loss and accumulates fresh gradients. A non-finite loss stops
// with the step and the first non-finite parameter or module output (in forward order).
inline ForwardBackwardResult forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                              const Batch& batch, int step) {
  arena.reset();
  trace.entries.clear();
  Backend<float>& backend = model.backend();
  StepContext<float> ctx{arena, backend};
  ctx.trace = &trace;
  ParameterStore<float>& params = model.params();
  params.zero_grad();
  const int N = batch.B * batch.T;
  const int* tokens = ctx.upload(std::span<const int>(batch.tokens));
  const int* targets = ctx.upload(std::span<const int>(batch.targets));
  const float* mask = ctx.upload(std::span<const float>(batch.loss_mask));
  const float* logits = model.forward(ctx, tokens, batch.B, batch.T);
  LossResult<float> loss = masked_cross_entropy(ctx, logits, targets, mask, N, model.vocab_size(), true);
  if (!std::isfinite(loss.loss)) {
    std::string where = step_detail::first_non_finite(backend, params.values(), params);
    where = where.empty() ? step_detail::first_non_finite_output(backend, trace) : "parameter " + where;
    throw Error("training stopped: loss is " + std::to_string(loss.loss) + " at step " + std::to_string(step) +
                "; first non-finite output: " + (where.empty() ? "cross-entropy (all module outputs finite)" : where) +
                ". Lower train.lr, enable train.grad_clip, or check the data.");
  }
  model.backward(ctx, loss.dlogits, batch.B, batch.T);
  return {loss.loss, logits};
}

// Clips the gradients to train.grad_clip and applies one AdamW update at learning rate lr; returns the
// gradient norm before clipping. A non-finite gradient stops with the first parameter whose gradient is.
inline double apply_update(LanguageModel<float>& model, AdamWState& opt, const DeviceBuffer<uint8_t>& decay,
                           const TrainConfig& tc, double lr, int step) {
  Backend<float>& backend = model.backend();
  ParameterStore<float>& params = model.params();
  const double norm = backend.global_norm(params.grads().data(), params.total());
  if (!std::isfinite(norm))
    throw Error("training stopped: gradient norm is " + std::to_string(norm) + " at step " + std::to_string(step) +
                "; first non-finite gradient: " + step_detail::first_non_finite(backend, params.grads(), params));
  clip_grad_norm<float>(backend, params.grads(), norm, tc.grad_clip);
  adamw_step<float>(backend, params.values(), params.grads(), opt, decay, tc, lr);
  return norm;
}

}  // namespace canonlab
