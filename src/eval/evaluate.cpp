#include "eval/evaluate.h"

#include "train/loss.h"

namespace canonlab {

std::vector<Batch> make_eval_batches(const Task& task, const RunConfig& cfg) {
  std::vector<Batch> batches;
  for (int i = 0; i < cfg.train.eval_batches; i++)
    batches.push_back(task.make_batch(cfg.train.batch_size, cfg.train.data_seed, kHeldOutStream + uint64_t(i)));
  return batches;
}

nlohmann::json evaluate(LanguageModel<float>& model, const Task& task, const std::vector<Batch>& batches, Arena& arena) {
  double loss_sum = 0, loss_weight = 0;
  std::map<std::string, double> metric_sum;
  double metric_weight = 0;
  for (const Batch& b : batches) {
    arena.reset();
    StepContext<float> ctx{arena};
    const float* logits = model.forward(ctx, b.tokens.data(), b.B, b.T);
    const int V = model.vocab_size();
    LossResult<float> r =
        masked_cross_entropy(arena, logits, b.targets.data(), b.loss_mask.data(), b.B * b.T, V, false);
    double lw = 0, sw = 0;
    for (float m : b.loss_mask) lw += m;
    for (float m : b.score_mask) sw += m;
    loss_sum += r.loss * lw;
    loss_weight += lw;
    for (auto& [k, v] : task.metrics(b, logits)) metric_sum[k] += v * sw;
    metric_weight += sw;
  }
  nlohmann::json j;
  j["loss"] = loss_weight > 0 ? loss_sum / loss_weight : 0.0;
  for (auto& [k, v] : metric_sum) j[k] = metric_weight > 0 ? v / metric_weight : 0.0;
  return j;
}

}  // namespace canonlab
