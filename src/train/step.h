#pragma once
// One training step, shared by the trainer, `debug-dump` and `bench-step`:
//   forward_backward: upload the batch -> zero grads -> forward -> masked loss -> (non-finite check) -> backward
//   apply_update:     global grad norm -> (non-finite check) -> clip -> AdamW
// Everything runs on the model's backend; only the loss and the gradient norm come back to the host.
#include <cmath>
#include <string>

#include "data/task.h"
#include "engine/comm/communicator.h"
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
// with the step and the first non-finite parameter or module output (in forward order). loss_denominator > 0 is
// the mask sum of the whole global batch when `batch` is one micro-batch of it (0: the batch's own).
inline ForwardBackwardResult forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                              const Batch& batch, int step, double loss_denominator = 0) {
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
  LossResult<float> loss =
      masked_cross_entropy(ctx, logits, targets, mask, N, model.vocab_size(), true, loss_denominator);
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

// How a step's global batch (train.batch_size sequences) is split: over the ranks, then into each rank's
// micro-batches. Micro-batch k = rank * micro_batches + m holds rows [k * rows, (k + 1) * rows) of the global batch,
// so the sequences (drawn per global row) do not depend on the split.
struct BatchSplit {
  int ranks = 1, rank = 0, micro_batches = 1, rows = 0;
  int first_row(int m) const { return (rank * micro_batches + m) * rows; }
};
inline BatchSplit split_batch(const TrainConfig& tc, int ranks, int rank) {
  const int parts = ranks * tc.micro_batches;
  if (tc.batch_size % parts != 0)
    throw Error("train.batch_size: " + std::to_string(tc.batch_size) + " sequences cannot be split over " +
                std::to_string(ranks) + " rank(s) x train.micro_batches = " + std::to_string(tc.micro_batches) +
                "; allowed: a multiple of " + std::to_string(parts) + " (or another rank count or micro_batches)");
  return {ranks, rank, tc.micro_batches, tc.batch_size / parts};
}

// The masked-loss weight of a batch, Σ mask in row order in double: the sum masked_cross_entropy forms.
inline double loss_mask_weight(const Batch& batch) {
  double weight = 0;
  for (const float m : batch.loss_mask)
    if (m != 0.f) weight += m;
  return weight;
}

// The left fold of `values` in order, starting from the first (so one value is returned as is).
inline double fold_in_order(std::span<const double> values) {
  double sum = values.empty() ? 0.0 : values[0];
  for (size_t i = 1; i < values.size(); i++) sum += values[i];
  return sum;
}

struct GlobalStepResult {
  double loss = 0;       // the global batch's masked mean loss
  int stop_signal = 0;   // a stop signal any rank received (train/stop_signals.h), else 0
};

// The gradient of the global batch's mean loss, in params.grads() on every rank: this rank's micro-batches in
// order, each divided by the global mask sum, their gradients folded left (g0 + g1) + g2 ..., then the ranks'
// sums folded in rank order by the communicator. So N ranks with one micro-batch each give the bits of one
// process with N micro-batches, and one micro-batch on one process is the plain step. `folded` holds the running
// sum between micro-batches (unused with one). The loss and the ranks' stop signals are shared the same way.
inline GlobalStepResult global_forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                                std::span<const Batch> micro_batches, DeviceBuffer<float>& folded,
                                                Communicator& comm, int step, int local_stop_signal) {
  double local_weight = 0;
  for (const Batch& b : micro_batches) local_weight += loss_mask_weight(b);
  const double weight = fold_in_order(comm.all_gather(std::span<const double>(&local_weight, 1)));
  Backend<float>& backend = model.backend();
  std::span<float> grads = model.params().grads();
  double local_loss = 0;
  for (size_t m = 0; m < micro_batches.size(); m++) {
    if (m > 0) backend.copy(folded.data(), grads.data(), grads.size());
    local_loss += forward_backward(model, arena, trace, micro_batches[m], step, weight).loss;
    if (m > 0) backend.add(grads.data(), folded.data(), grads.data(), grads.size());
  }
  comm.sum_in_rank_order(grads.data(), grads.size());
  const double mine[2] = {local_loss, double(local_stop_signal)};
  const std::vector<double> all = comm.all_gather(std::span<const double>(mine, 2));
  GlobalStepResult result;
  result.loss = all[0];
  for (int r = 0; r < comm.size(); r++) {
    if (r > 0) result.loss += all[size_t(2 * r)];
    if (result.stop_signal == 0) result.stop_signal = int(all[size_t(2 * r + 1)]);
  }
  return result;
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
