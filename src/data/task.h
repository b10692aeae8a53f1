#pragma once
// The seam every data generator implements. Generators are online and deterministic: sequence `index` of
// stream `stream` is a pure function of (seed, stream, index), so data never depends on thread count and a
// resumed run sees exactly the batches the uninterrupted run would have seen.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"

namespace canonlab {

// One batch of B sequences of length T, token-major.
struct Batch {
  int B = 0, T = 0;
  std::vector<int> tokens;         // (B, T) model inputs
  std::vector<int> targets;        // (B, T) next-token targets (0 where unused)
  std::vector<float> loss_mask;    // (B, T) 1 where the target contributes to the training loss
  std::vector<float> score_mask;   // (B, T) 1 where the task metric is scored (e.g. copy_acc positions)

  void resize(int b, int t) {
    B = b;
    T = t;
    tokens.assign(size_t(b) * t, 0);
    targets.assign(size_t(b) * t, 0);
    loss_mask.assign(size_t(b) * t, 0.f);
    score_mask.assign(size_t(b) * t, 0.f);
  }
};

// Streams: training batches use stream = step; held-out data uses streams at and above kHeldOutStream.
inline constexpr uint64_t kHeldOutStream = uint64_t(1) << 62;

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;  // including special tokens
  virtual int seq_len() const = 0;
  // Fills row `row` of `batch` with sequence `index` of stream `stream`.
  virtual void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const = 0;
  // Task metrics from logits (B, T, V) for a batch made by this task; keys are metric names.
  virtual std::map<std::string, double> metrics(const Batch& batch, const float* logits) const = 0;
  // Human-readable token, for `data show` and reports.
  virtual std::string token_text(int token) const = 0;

  Batch make_batch(int B, uint64_t seed, uint64_t stream) const {
    Batch batch;
    batch.resize(B, seq_len());
    for (int b = 0; b < B; b++) sample(batch, b, seed, stream, uint64_t(b));
    return batch;
  }
};

std::unique_ptr<Task> make_task(const TaskConfig& cfg);

}  // namespace canonlab
