#include "eval/evaluate.h"

#include <cmath>

#include "engine/error.h"
#include "eval/generate.h"
#include "train/loss.h"

namespace canonlab {

const float* logits_over_task_vocab(const float* logits, int rows, int model_vocab, int task_vocab,
                                    std::vector<float>& buffer) {
  if (model_vocab == task_vocab) return logits;
  buffer.resize(size_t(rows) * size_t(task_vocab));
  for (int r = 0; r < rows; r++)
    std::copy(logits + size_t(r) * model_vocab, logits + size_t(r) * model_vocab + task_vocab,
              buffer.begin() + long(r) * task_vocab);
  return buffer.data();
}

std::vector<EvalBatch> make_eval_batches(const Task& task, const RunConfig& cfg) {
  std::vector<EvalBatch> batches;
  const std::vector<std::string> suites = task.eval_suites();
  const int count = task.eval_batch_count(cfg.train.eval_batches, cfg.train.batch_size);
  for (int s = 0; s < int(suites.size()); s++)
    for (int i = 0; i < count; i++)
      batches.push_back({s, task.make_eval_batch(cfg.train.batch_size, cfg.train.data_seed,
                                                  kHeldOutStream + uint64_t(s) * kHeldOutSuiteStride + uint64_t(i), s)});
  return batches;
}

EvalPass evaluation_pass(LanguageModel<float>& model, Arena& arena, const Batch& b) {
  arena.reset();
  StepContext<float> ctx{arena, model.backend()};
  const int* tokens = ctx.upload(std::span<const int>(b.tokens));
  const int* targets = ctx.upload(std::span<const int>(b.targets));
  const float* mask = ctx.upload(std::span<const float>(b.loss_mask));
  const float* logits = model.forward(ctx, tokens, b.B, b.T);
  return {logits, masked_cross_entropy_value(ctx, logits, targets, mask, b.B * b.T, model.vocab_size())};
}

nlohmann::json evaluate(LanguageModel<float>& model, const Task& task, const std::vector<EvalBatch>& batches,
                        const RunConfig& cfg, Arena& arena) {
  double loss_sum = 0, loss_weight = 0;
  MetricSums sums;
  std::vector<float> task_logits;
  std::vector<float> host_logits;
  for (const EvalBatch& eb : batches) {
    const Batch& b = eb.batch;
    const int N = b.B * b.T, V = model.vocab_size();
    const EvalPass pass = evaluation_pass(model, arena, b);
    const float* logits = pass.logits;
    const double batch_loss = pass.loss;
    double lw = 0;
    for (float m : b.loss_mask) lw += m;
    loss_sum += batch_loss * lw;
    loss_weight += lw;
    // Scoring reads the logits on the host (a download where the device is not the CPU).
    const float* scored = host_view(arena.memory(), logits, size_t(N) * V, host_logits).data();
    task.score(b, logits_over_task_vocab(scored, N, V, task.vocab_size(), task_logits), eb.suite, sums);
  }
  if (task.has_generation_eval()) {
    ModelSampler sampler(model, arena, cfg.train.batch_size);
    task.score_generation(sampler, cfg.train.data_seed ^ 0x5eed5eedULL, cfg.task.eval_samples, sums);
  }
  std::map<std::string, double> metrics;
  for (auto& [k, m] : sums) metrics[k] = m.count > 0 ? m.sum / m.count : 0.0;
  task.finish_metrics(metrics);
  // A non-finite held-out loss would be written as JSON null and read as a result; it is a failure instead.
  const double loss = loss_weight > 0 ? loss_sum / loss_weight : 0.0;
  CANONLAB_CHECK(std::isfinite(loss), "evaluation: the held-out loss is " + std::to_string(loss) +
                                          " although every weight is finite (logits overflowed); the model has diverged");
  nlohmann::json j;
  j["loss"] = loss;
  for (auto& [k, v] : metrics) j[k] = v;
  if (j.contains("capo_bits")) j["capo_bits_per_param"] = j["capo_bits"].get<double>() / double(model.params().total());
  return j;
}

}  // namespace canonlab
