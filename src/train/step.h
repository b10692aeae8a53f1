#pragma once
// One training step, shared by the trainer, `debug-dump` and `bench-step`. The host writes the step's inputs (its
// micro-batches, the loss denominator, AdamW's coefficients, the step number) into one device block; the step itself
// is enqueued on the model's backend as one unit (Backend::run_step: on a GPU, one captured graph):
//   per micro-batch: zero grads -> forward -> masked loss -> backward (gradients folded in order, train/step.h)
//   -> the ranks' sum -> Σ g² -> the step guard -> clip -> AdamW
// and leaves its scalars in device memory: each micro-batch's loss, Σ g² and the step the guard stopped at. The host
// reads them when it needs them (TrainStep::read): every step where that costs nothing (host memory), on a GPU once
// per logged step. A step whose loss or gradient norm is not finite updates nothing, nor does any step after it, so
// the run's parameters stay those of the step that went wrong; report_halt() re-runs that step to name the first
// non-finite parameter, module output or gradient.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/task.h"
#include "engine/comm/communicator.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/loss.h"

namespace canonlab {

// How a step's global batch (train.batch_size sequences) is split: over the ranks, then into each rank's
// micro-batches. Micro-batch k = rank * micro_batches + m holds rows [k * rows, (k + 1) * rows) of the global batch,
// so the sequences (drawn per global row) do not depend on the split.
struct BatchSplit {
  int ranks = 1, rank = 0, micro_batches = 1, rows = 0;
  int first_row(int m) const { return (rank * micro_batches + m) * rows; }
};
BatchSplit split_batch(const TrainConfig& tc, int ranks, int rank);

// The masked-loss weight of a batch, Σ mask in row order in double: the sum masked_cross_entropy forms.
double loss_mask_weight(const Batch& batch);

// The left fold of `values` in order, starting from the first (so one value is returned as is).
double fold_in_order(std::span<const double> values);

// Enqueues one batch's forward, masked loss and backward (the arena reset first). tokens, targets, mask: (B, T) in the
// backend's memory; denominator: a device double (Σ mask of the whole global batch) or null (this batch's Σ mask);
// *loss: the batch's loss, a device double. Gradients are accumulated onto params().grads(). Returns the logits
// (B, T, V) in the arena. backward = false: the forward pass and the loss only (gradients untouched).
const float* enqueue_forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                      const int* tokens, const int* targets, const float* mask, int B, int T,
                                      const double* denominator, double* loss, bool backward = true);

struct ForwardBackwardResult {
  double loss = 0;
  const float* logits = nullptr;  // (B, T, V) in the arena (device memory), valid until the arena is reset
};

// One batch's forward and backward run at once, the loss read back: fresh gradients (zeroed first). A non-finite
// loss throws the trainer's message (see TrainStep::report_halt). loss_denominator > 0 divides by it instead of
// Σ mask. For debug-dump and tests; the trainer uses TrainStep.
ForwardBackwardResult forward_backward(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace,
                                       const Batch& batch, int step, double loss_denominator = 0);

class TrainStep {
 public:
  // The step of `model` with AdamW state `opt` (its moments allocated here if it has none), the decay mask, and the
  // split's micro-batches of `split.rows` sequences of T tokens. comm sums the ranks' gradients.
  TrainStep(LanguageModel<float>& model, Arena& arena, ActivationTrace<float>& trace, AdamWState& opt,
            const DeviceBuffer<uint8_t>& decay, const TrainConfig& tc, Communicator& comm, BatchSplit split, int T);
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Uploads the inputs of `step` (this rank's micro-batches, the global batch's mask sum `weight`, the learning rate)
  // and enqueues it. Returns without waiting for it.
  void enqueue(std::span<const Batch> micro_batches, double weight, int step, double lr);

  // Enqueues a step on whatever the inputs block holds, without writing it: what the resource estimate's counting
  // backend steps (it runs nothing and reads nothing; train/resource_estimate.cpp).
  void enqueue_on_current_inputs();

  struct Scalars {
    std::vector<double> losses;  // each micro-batch's loss (divided by the global mask sum)
    double sumsq = 0;            // Σ g² of the summed gradients, before clipping
    int halted_at = -1;          // the first step whose loss or gradient norm was not finite, or -1
    double loss() const { return fold_in_order(losses); }  // this rank's share of the global loss
  };
  // Waits for the enqueued steps and reads the latest one's scalars (and the guard).
  Scalars read() const;

  // Throws the non-finite guard's error for the step the guard stopped at: `micro_batches` and `weight` are that step's
  // inputs. latest: it is the step last enqueued (its gradients are still in params().grads()); otherwise the step
  // is run again here, from the parameters it started from (the guard kept them), to find the culprit.
  [[noreturn]] void report_halt(const Scalars& scalars, std::span<const Batch> micro_batches, double weight,
                                bool latest);

 private:
  struct Layout {  // byte offsets into the inputs block
    std::vector<size_t> tokens, targets, mask;
    size_t denominator = 0, coefficients = 0, step = 0, bytes = 0;
  };
  void write_inputs(std::span<const Batch> micro_batches, double weight, int step, double lr);
  void enqueue_step();
  template <class U>
  U* input(size_t offset) const {
    return reinterpret_cast<U*>(inputs_.data() + offset);
  }

  LanguageModel<float>& model_;
  Backend<float>& backend_;
  Arena& arena_;
  ActivationTrace<float>& trace_;
  AdamWState& opt_;
  const DeviceBuffer<uint8_t>& decay_;
  const TrainConfig& tc_;
  Communicator& comm_;
  const BatchSplit split_;
  const int T_;
  Layout layout_;
  std::vector<std::byte> host_inputs_;
  DeviceBuffer<std::byte> inputs_;
  DeviceBuffer<double> scalars_;     // (micro_batches + 1): the losses, then Σ g²
  DeviceBuffer<int32_t> halted_at_;  // (1)
  DeviceBuffer<float> folded_;       // the running gradient sum between micro-batches (empty with one)
};

}  // namespace canonlab
