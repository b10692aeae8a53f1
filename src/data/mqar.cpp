#include "data/mqar.h"

#include <cmath>
#include <unordered_set>

#include "data/packing.h"
#include "engine/error.h"

namespace canonlab {

MqarTask::MqarTask(const TaskConfig& cfg)
    : vocab_(cfg.mqar.vocab), pairs_(cfg.mqar.pairs), context_(cfg.context > 0 ? cfg.context : 64),
      random_non_queries_(cfg.mqar.random_non_queries), answers_only_(loss_on_answers(cfg)) {
  CANONLAB_CHECK(cfg.context >= 0, "task.context: " + std::to_string(cfg.context) +
                                       " is negative; allowed: 0 (the MQAR default, 64) or >= 4 * task.mqar.pairs");
  CANONLAB_CHECK(pairs_ >= 1, "task.mqar.pairs: " + std::to_string(pairs_) + " is not allowed; allowed: >= 1");
  CANONLAB_CHECK(4 * pairs_ <= context_,
                 "task.mqar.pairs: " + std::to_string(pairs_) + " key-value pairs need 4 * pairs = " +
                     std::to_string(4 * pairs_) + " tokens (2K for the pairs, K distinct even query slots after them), "
                     "but task.context is " + std::to_string(context_) + "; allowed: task.mqar.pairs <= " +
                     std::to_string(context_ / 4) + " or task.context >= " + std::to_string(4 * pairs_));
  CANONLAB_CHECK(vocab_ > context_, "task.mqar.vocab: " + std::to_string(vocab_) + " must exceed task.context = " +
                                        std::to_string(context_) + " (Zoology's constraint V > seq_len); allowed: >= " +
                                        std::to_string(context_ + 1));
  CANONLAB_CHECK(cfg.mqar.power_a > 0 && std::isfinite(cfg.mqar.power_a),
                 "task.mqar.power_a: " + std::to_string(cfg.mqar.power_a) + " is not allowed; allowed: > 0");
  const int space = gap_space();
  gap_weight_.resize(size_t(space));
  for (int g = 0; g < space; g++) gap_weight_[size_t(g)] = std::pow(double(g + 1), cfg.mqar.power_a - 1.0);
}

// K distinct ids uniform in [lo, hi), in draw order (rejection; K <= (hi - lo) / 2 here, so it is quick).
static std::vector<int> distinct_uniform(CounterRng& rng, int count, int lo, int hi) {
  std::vector<int> out;
  std::unordered_set<int> seen;
  while (int(out.size()) < count) {
    const int x = lo + int(rng.below(uint64_t(hi - lo)));
    if (seen.insert(x).second) out.push_back(x);
  }
  return out;
}

MqarInstance MqarTask::draw(CounterRng& rng) const {
  const int T = context_, K = pairs_, context_size = 2 * K;
  MqarInstance m;
  m.keys = distinct_uniform(rng, K, 1, first_value());
  m.values = distinct_uniform(rng, K, first_value(), vocab_);
  // Gaps: K draws without replacement, each from the weights left (what numpy's choice(replace=False, p=...) samples).
  std::vector<double> weight = gap_weight_;
  for (int j = 0; j < K; j++) {
    double total = 0;
    for (double w : weight) total += w;
    double u = rng.uniform() * total;
    int pick = -1;
    for (int g = 0; g < int(weight.size()); g++) {
      if (weight[size_t(g)] == 0) continue;
      pick = g;  // the last available gap absorbs rounding at the top end
      u -= weight[size_t(g)];
      if (u < 0) break;
    }
    m.gaps.push_back(pick);
    weight[size_t(pick)] = 0;
  }

  m.tokens.assign(size_t(T), 0);
  m.targets.assign(size_t(T), 0);
  m.is_query.assign(size_t(T), 0);
  for (int j = 0; j < K; j++) {
    m.tokens[size_t(2 * j)] = m.keys[size_t(j)];
    m.tokens[size_t(2 * j + 1)] = m.values[size_t(j)];
  }
  for (int j = 0; j < K; j++) {
    const int pos = context_size + 2 * m.gaps[size_t(j)];  // <= T - 2, so the target slot always exists
    m.tokens[size_t(pos)] = m.keys[size_t(j)];
    m.is_query[size_t(pos)] = 1;
  }
  // Zoology replaces the input zeros (all non-query slots after the pairs) by tokens uniform in [0, V).
  if (random_non_queries_)
    for (int t = context_size; t < T; t++)
      if (m.tokens[size_t(t)] == 0) m.tokens[size_t(t)] = int(rng.below(uint64_t(vocab_)));
  for (int t = 0; t + 1 < T; t++) m.targets[size_t(t)] = m.tokens[size_t(t + 1)];
  for (int j = 0; j < K; j++) m.targets[size_t(context_size + 2 * m.gaps[size_t(j)])] = m.values[size_t(j)];
  return m;
}

void MqarTask::sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const {
  CounterRng rng = row_rng(seed, stream, index);
  const MqarInstance m = draw(rng);
  const int T = batch.T;
  CANONLAB_CHECK(T == context_, "mqar: batch window " + std::to_string(T) + " differs from task.context " +
                                    std::to_string(context_));
  const size_t base = size_t(row) * size_t(T);
  for (int t = 0; t < T; t++) {
    const size_t i = base + size_t(t);
    const bool query = m.is_query[size_t(t)] != 0;
    batch.tokens[i] = m.tokens[size_t(t)];
    batch.targets[i] = m.targets[size_t(t)];
    batch.loss_mask[i] = (query || (!answers_only_ && t + 1 < T)) ? 1.f : 0.f;
    batch.score_mask[i] = query ? 1.f : 0.f;
    batch.score_tag[i] = 0;
  }
}

void MqarTask::score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const {
  (void)suite;
  score_argmax_accuracy(batch, logits, vocab_size(), "mqar_acc", sums);
}

std::string MqarTask::token_text(int token) const {
  if (token == 0) return "_";
  if (token >= 1 && token < first_value()) return "k" + std::to_string(token);
  if (token >= first_value() && token < vocab_) return "v" + std::to_string(token - first_value());
  return "?" + std::to_string(token);
}

}  // namespace canonlab
