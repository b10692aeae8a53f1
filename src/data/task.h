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
#include "engine/rng.h"

namespace canonlab {

// One batch of B sequences of length T, token-major.
struct Batch {
  int B = 0, T = 0;
  std::vector<int> tokens;         // (B, T) model inputs
  std::vector<int> targets;        // (B, T) next-token targets (0 where unused)
  std::vector<float> loss_mask;    // (B, T) 1 where the target contributes to the training loss
  std::vector<float> score_mask;   // (B, T) 1 where the task metric is scored (e.g. answer tokens)
  std::vector<int> score_tag;      // (B, T) task-defined label of a scored position (Capo: which attribute), else 0

  void resize(int b, int t) {
    B = b;
    T = t;
    tokens.assign(size_t(b) * t, 0);
    targets.assign(size_t(b) * t, 0);
    loss_mask.assign(size_t(b) * t, 0.f);
    score_mask.assign(size_t(b) * t, 0.f);
    score_tag.assign(size_t(b) * t, 0);
  }
};

// Streams: training batches use stream = step; held-out data uses streams at and above kHeldOutStream.
inline constexpr uint64_t kHeldOutStream = uint64_t(1) << 62;
// Held-out batch i of suite s has stream kHeldOutStream + s * kHeldOutSuiteStride + i (make_eval_batches).
inline constexpr uint64_t kHeldOutSuiteStride = 1000003;

// A metric accumulated over batches as sum / count (accuracy = hits / scored tokens, bpc = bits / chars, ...).
struct MetricSum {
  double sum = 0, count = 0;
  void add(double value, double weight = 1) { sum += value, count += weight; }
};
using MetricSums = std::map<std::string, MetricSum>;

// What a task's generative evaluation needs from a model, without depending on models: continue prompts.
class TokenSampler {
 public:
  virtual ~TokenSampler() = default;
  // Continues every prompt by up to max_new tokens, stopping a row after it emits any of stop_tokens (kept in the
  // output). temperature 0 = greedy argmax; otherwise sampling from softmax(logits / temperature) with a stream
  // derived from (seed, row), so results do not depend on batching or thread count. Returns only the new tokens.
  virtual std::vector<std::vector<int>> continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                         const std::vector<int>& stop_tokens, double temperature,
                                                         uint64_t seed) = 0;
  virtual int max_length() const = 0;  // prompt + continuation never exceed this
};

// The RNG of one row (Task::sample's seed, stream, index): every row of every stream draws from its own
// counter-based stream.
inline CounterRng row_rng(uint64_t seed, uint64_t stream, uint64_t index) {
  return CounterRng(seed, stream * 0x100000001b3ULL + index);
}

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;  // including special tokens
  virtual int seq_len() const = 0;
  // Fills row `row` of `batch` with training sequence `index` of stream `stream`.
  virtual void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const = 0;
  virtual std::string token_text(int token) const = 0;
  // The metric names evaluate() reports for this task, headline first (progress bar, metrics.csv columns).
  virtual std::vector<std::string> metric_names() const = 0;

  // Held-out evaluation by teacher forcing runs over one or more suites (Depo: k = K and k = K/2), each with its
  // own sequences. sample_eval defaults to sample().
  virtual std::vector<std::string> eval_suites() const { return {""}; }
  // Held-out batches of `batch_rows` rows per suite and evaluation: `configured` (train.eval_batches) unless the
  // task's held-out set has its own size (text with task.text.eval_whole_split: every window once).
  virtual int eval_batch_count(int configured, int batch_rows) const {
    (void)batch_rows;
    return configured;
  }
  virtual void sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const {
    (void)suite;
    sample(batch, row, seed, stream, index);
  }
  // Adds this batch's task metrics, computed from logits (B, T, V), to `sums`.
  virtual void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const = 0;

  // Turns the averaged sums into derived metrics (Capo: bits from per-attribute losses). Called once per evaluation.
  virtual void finish_metrics(std::map<std::string, double>& metrics) const { (void)metrics; }

  // Tasks scored on what the model generates (Brevo, Lano) override this; `count` problems, seeded.
  virtual bool has_generation_eval() const { return false; }
  virtual void score_generation(TokenSampler& sampler, uint64_t seed, int count, MetricSums& sums) const {
    (void)sampler, (void)seed, (void)count, (void)sums;
  }

  Batch make_batch(int B, uint64_t seed, uint64_t stream) const {
    Batch batch;
    batch.resize(B, seq_len());
    for (int b = 0; b < B; b++) sample(batch, b, seed, stream, uint64_t(b));
    return batch;
  }
  Batch make_eval_batch(int B, uint64_t seed, uint64_t stream, int suite) const {
    Batch batch;
    batch.resize(B, seq_len());
    for (int b = 0; b < B; b++) sample_eval(batch, b, seed, stream, uint64_t(b), suite);
    return batch;
  }
};

// Teacher-forced argmax accuracy over the scored positions of a batch, added to sums[metric].
void score_argmax_accuracy(const Batch& batch, const float* logits, int vocab, const std::string& metric,
                           MetricSums& sums);

struct TaskShape {
  int vocab_size = 0;
  int seq_len = 0;
};

// The paper's loss rule for task.loss_on = default: Depo, Brevo and MQAR train on their answers only, every other
// task on every token.
bool paper_trains_on_answers_only(const std::string& task_name);

// Builds the task of a resolved config. Errors name the task.* key at fault.
std::unique_ptr<Task> make_task(const TaskConfig& cfg);
// The task's vocabulary and window, for config resolution (builds the task, except a generated Lano grammar).
TaskShape task_shape(const TaskConfig& cfg);

}  // namespace canonlab
