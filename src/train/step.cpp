#include "train/step.h"

#include <cmath>
#include <cstring>

namespace canonlab {

namespace {

constexpr uint64_t kTrainStepKey = 1;  // Backend::run_step's key: every step of a run has the same shapes

size_t align_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

double read_device_double(DeviceMemory& memory, const double* p) {
  double value = 0;
  memory.copy_to_host(&value, p, sizeof value);
  return value;
}

std::string first_non_finite_output(Backend<float>& backend, const ActivationTrace<float>& trace) {
  for (const auto& e : trace.entries)
    if (backend.first_non_finite(e.data, e.count) < e.count) return *e.module;
  return "";
}

std::string first_non_finite_tensor(Backend<float>& backend, const float* values, const ParameterStore<float>& params) {
  for (const ParamInfo& p : params.infos())
    if (backend.first_non_finite(values + p.offset, p.numel) < p.numel) return p.name;
  return "";
}

// The guard's message for a non-finite loss: the first non-finite parameter, else the first module output (in forward
// order) of the trace of that forward pass.
[[noreturn]] void throw_loss_halt(LanguageModel<float>& model, const ActivationTrace<float>& trace, double loss,
                                  int step) {
  Backend<float>& backend = model.backend();
  std::string where = first_non_finite_tensor(backend, model.params().values().data(), model.params());
  where = where.empty() ? first_non_finite_output(backend, trace) : "parameter " + where;
  throw Error("training stopped: loss is " + std::to_string(loss) + " at step " + std::to_string(step) +
              "; first non-finite output: " + (where.empty() ? "cross-entropy (all module outputs finite)" : where) +
              ". Lower train.lr, enable train.grad_clip, or check the data.");
}

[[noreturn]] void throw_gradient_halt(LanguageModel<float>& model, double sumsq, int step) {
  throw Error("training stopped: gradient norm is " + std::to_string(std::sqrt(sumsq)) + " at step " +
              std::to_string(step) + "; first non-finite gradient: " +
              first_non_finite_tensor(model.backend(), model.params().grads().data(), model.params()));
}

}  // namespace

BatchSplit split_batch(const TrainConfig& tc, int ranks, int rank) {
  const int parts = ranks * tc.micro_batches;
  if (tc.batch_size % parts != 0)
    throw Error("train.batch_size: " + std::to_string(tc.batch_size) + " sequences cannot be split over " +
                std::to_string(ranks) + " rank(s) x train.micro_batches = " + std::to_string(tc.micro_batches) +
                "; allowed: a multiple of " + std::to_string(parts) + " (or another rank count or micro_batches)");
  return {ranks, rank, tc.micro_batches, tc.batch_size / parts};
}

double loss_mask_weight(const Batch& batch) {
  double weight = 0;
  for (const float m : batch.loss_mask)
    if (m != 0.f) weight += m;
  return weight;
}

double fold_in_order(std::span<const double> values) {
  double sum = values.empty() ? 0.0 : values[0];
  for (size_t i = 1; i < values.size(); i++) sum += values[i];
  return sum;
}

const float* enqueue_forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                      const int* tokens, const int* targets, const float* mask, int B, int T,
                                      const double* denominator, double* loss, bool backward) {
  arena.reset();
  trace.entries.clear();
  Backend<float>& backend = model.backend();
  StepContext<float> ctx{arena, backend};
  ctx.trace = &trace;
  ParameterStore<float>& params = model.params();
  if (backward) backend.fill_zero(params.grads().data(), params.total());
  const float* logits = model.forward(ctx, tokens, B, T);
  const LossResult<float> r =
      masked_cross_entropy(ctx, logits, targets, mask, B * T, model.vocab_size(), backward, denominator, loss);
  if (backward) model.backward(ctx, r.dlogits, B, T);
  return logits;
}

ForwardBackwardResult forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                       const Batch& batch, int step, double loss_denominator) {
  // The batch and the two scalars in memory of their own (the arena is reset by the pass).
  DeviceMemory& memory = model.backend().memory();
  const DeviceBuffer<int> tokens(memory, std::span<const int>(batch.tokens));
  const DeviceBuffer<int> targets(memory, std::span<const int>(batch.targets));
  const DeviceBuffer<float> mask(memory, std::span<const float>(batch.loss_mask));
  const std::vector<double> host_scalars = {loss_denominator, 0.0};
  DeviceBuffer<double> scalars(memory, std::span<const double>(host_scalars));
  const float* logits = enqueue_forward_backward(model, arena, trace, tokens.data(), targets.data(), mask.data(),
                                                 batch.B, batch.T, scalars.data(), scalars.data() + 1);
  const double loss = read_device_double(memory, scalars.data() + 1);
  if (!std::isfinite(loss)) throw_loss_halt(model, trace, loss, step);
  return {loss, logits};
}

TrainStep::TrainStep(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace, AdamWState& opt,
                     const DeviceBuffer<uint8_t>& decay, const TrainConfig& tc, Communicator& comm, BatchSplit split,
                     int T)
    : model_(model), backend_(model.backend()), arena_(arena), trace_(trace), opt_(opt), decay_(decay),
      tc_(tc), comm_(comm), split_(split), T_(T) {
  DeviceMemory& memory = backend_.memory();
  const size_t rows = size_t(split.rows) * T;
  size_t at = 0;
  for (int m = 0; m < split.micro_batches; m++) {
    layout_.tokens.push_back(at), at += align_up(rows * sizeof(int));
    layout_.targets.push_back(at), at += align_up(rows * sizeof(int));
    layout_.mask.push_back(at), at += align_up(rows * sizeof(float));
  }
  layout_.denominator = at, at += align_up(sizeof(double));
  layout_.coefficients = at, at += align_up(sizeof(AdamWCoefficients));
  layout_.step = at, at += align_up(sizeof(int32_t));
  layout_.bytes = at;
  inputs_ = DeviceBuffer<std::byte>(memory, at);
  inputs_.fill_zero();
  scalars_ = DeviceBuffer<double>(memory, size_t(split.micro_batches) + 1);
  scalars_.fill_zero();
  halted_at_ = DeviceBuffer<int32_t>(memory, 1);
  halted_at_.fill_bytes(0xff);  // -1: no step has gone wrong
  ensure_moments(opt_, memory, model.params().total());
  if (split.micro_batches > 1) folded_ = DeviceBuffer<float>(memory, model.params().total());
}

void TrainStep::write_inputs(std::span<const Batch> micro_batches, double weight, int step, double lr) {
  CANONLAB_CHECK(int(micro_batches.size()) == split_.micro_batches,
                 "TrainStep: " + std::to_string(micro_batches.size()) + " micro-batches for a step of " +
                     std::to_string(split_.micro_batches));
  const size_t rows = size_t(split_.rows) * T_;
  host_inputs_.resize(layout_.bytes);
  for (size_t m = 0; m < micro_batches.size(); m++) {
    const Batch& b = micro_batches[m];
    CANONLAB_CHECK(b.tokens.size() == rows && b.targets.size() == rows && b.loss_mask.size() == rows,
                   "TrainStep: a micro-batch of " + std::to_string(b.tokens.size()) + " tokens; the step takes " +
                       std::to_string(rows));
    std::memcpy(host_inputs_.data() + layout_.tokens[m], b.tokens.data(), rows * sizeof(int));
    std::memcpy(host_inputs_.data() + layout_.targets[m], b.targets.data(), rows * sizeof(int));
    std::memcpy(host_inputs_.data() + layout_.mask[m], b.loss_mask.data(), rows * sizeof(float));
  }
  const AdamWCoefficients k = adamw_coefficients(tc_, opt_.t + 1, lr);
  const int32_t step32 = step;
  std::memcpy(host_inputs_.data() + layout_.denominator, &weight, sizeof weight);
  std::memcpy(host_inputs_.data() + layout_.coefficients, &k, sizeof k);
  std::memcpy(host_inputs_.data() + layout_.step, &step32, sizeof step32);
}

// Everything below reads its per-step values from the inputs block: nothing the host changes from step to step is
// an argument, so a captured graph of it replays any step.
void TrainStep::enqueue_step() {
  ParameterStore<float>& params = model_.params();
  const size_t P = params.total();
  float* grads = params.grads().data();
  const double* denominator = input<const double>(layout_.denominator);
  for (int m = 0; m < split_.micro_batches; m++) {
    if (m > 0) backend_.copy(folded_.data(), grads, P);
    enqueue_forward_backward(model_, arena_, trace_, input<const int>(layout_.tokens[size_t(m)]),
                             input<const int>(layout_.targets[size_t(m)]), input<const float>(layout_.mask[size_t(m)]),
                             split_.rows, T_, denominator, scalars_.data() + m);
    if (m > 0) backend_.add(grads, folded_.data(), grads, P);
  }
  comm_.sum_in_rank_order(grads, P);
  double* sumsq = scalars_.data() + split_.micro_batches;
  backend_.grad_sum_squares(grads, P, sumsq);
  backend_.step_guard(halted_at_.data(), input<const int32_t>(layout_.step), scalars_.data(),
                      split_.micro_batches + 1);
  backend_.clip_grad_norm(grads, P, sumsq, tc_.grad_clip);
  backend_.adamw_update(params.values().data(), grads, opt_.m.data(), opt_.v.data(), decay_.data(), P,
                        input<const AdamWCoefficients>(layout_.coefficients), halted_at_.data());
}

void TrainStep::enqueue(std::span<const Batch> micro_batches, double weight, int step, double lr) {
  write_inputs(micro_batches, weight, step, lr);
  backend_.upload_async(inputs_.data(), host_inputs_.data(), host_inputs_.size());
  opt_.t += 1;
  // A communicator's sum may wait on the host (MPI): such steps run eagerly.
  if (comm_.size() == 1) backend_.run_step(kTrainStepKey, [this] { enqueue_step(); });
  else enqueue_step();
}

void TrainStep::enqueue_on_current_inputs() { enqueue_step(); }

TrainStep::Scalars TrainStep::read() const {
  Scalars s;
  const std::vector<double> scalars = scalars_.download();
  s.losses.assign(scalars.begin(), scalars.end() - 1);
  s.sumsq = scalars.back();
  s.halted_at = halted_at_.download()[0];
  return s;
}

void TrainStep::report_halt(const Scalars& scalars, std::span<const Batch> micro_batches, double weight, bool latest) {
  const int step = scalars.halted_at;
  // The losses first, micro-batch by micro-batch, as they were computed: the forward passes again from the
  // parameters the step started from (the guard kept them), so each gives the bits it gave then.
  DeviceMemory& memory = backend_.memory();
  write_inputs(micro_batches, weight, step, 0.0);
  backend_.upload_async(inputs_.data(), host_inputs_.data(), host_inputs_.size());
  for (int m = 0; m < split_.micro_batches; m++) {
    enqueue_forward_backward(model_, arena_, trace_, input<const int>(layout_.tokens[size_t(m)]),
                             input<const int>(layout_.targets[size_t(m)]), input<const float>(layout_.mask[size_t(m)]),
                             split_.rows, T_, input<const double>(layout_.denominator), scalars_.data() + m,
                             /*backward=*/false);
    const double loss = read_device_double(memory, scalars_.data() + m);
    if (!std::isfinite(loss)) throw_loss_halt(model_, trace_, loss, step);
  }
  // Every loss finite: the gradient norm was not. The latest step's gradients are still there; an earlier step's
  // are formed again (this rank's micro-batches, folded; a guard that stopped earlier implies one rank).
  if (!latest) {
    ParameterStore<float>& params = model_.params();
    const size_t P = params.total();
    float* grads = params.grads().data();
    for (int m = 0; m < split_.micro_batches; m++) {
      if (m > 0) backend_.copy(folded_.data(), grads, P);
      enqueue_forward_backward(model_, arena_, trace_, input<const int>(layout_.tokens[size_t(m)]),
                               input<const int>(layout_.targets[size_t(m)]),
                               input<const float>(layout_.mask[size_t(m)]), split_.rows, T_,
                               input<const double>(layout_.denominator), scalars_.data() + m);
      if (m > 0) backend_.add(grads, folded_.data(), grads, P);
    }
  }
  throw_gradient_halt(model_, scalars.sumsq, step);
}

}  // namespace canonlab
