#pragma once
// MQAR (multi-query associative recall) in the Zoology format (Arora et al. 2023, `_mqar` in
// HazyResearch/zoology zoology/data/associative_recall.py). One instance fills one window of T = task.context tokens:
//   k1 v1 k2 v2 .. kK vK | x x k3 x x x k1 x .. x            (T tokens; x = 0, or a random token in [0, V))
//                          ^ query region: key k_j at position 2K + 2*gap_j, target of that position = v_j
// Keys are K distinct ids from [1, V/2), values K distinct ids from [V/2, V). Every key is queried once, at an even
// offset 2*gap_j of the query region; the gaps are K distinct draws from 0..space-1 (space = (T - 2K) / 2) with
// p(gap = i - 1) ~ a * i^(a - 1), so short gaps are far more likely for a = 0.01. As in Zoology the value is only the
// *target* of the query position: the token after a query is filler (the model never sees the value repeated).
// Targets: the value at query positions; with loss_on = all, every other position's target is the next input token.
// Vocabulary V (no BOS, no specials). Metric mqar_acc: argmax accuracy at the query positions.
#include <vector>

#include "data/task.h"
#include "engine/rng.h"

namespace canonlab {

// One window with its structure, for tests and `canonlab data`.
struct MqarInstance {
  std::vector<int> keys, values;     // pair j: keys[j] -> values[j], listed in this order
  std::vector<int> gaps;             // gaps[j]: key j is queried at position 2K + 2*gaps[j]
  std::vector<int> tokens;           // (T) model inputs
  std::vector<int> targets;          // (T) value at query positions, else the next input token (0 at T-1)
  std::vector<uint8_t> is_query;     // (T) 1 at the K query positions
};

class MqarTask final : public Task {
 public:
  explicit MqarTask(const TaskConfig& cfg);
  std::string name() const override { return "mqar"; }
  int vocab_size() const override { return vocab_; }
  int seq_len() const override { return context_; }
  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override;
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override { return {"mqar_acc"}; }
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;

  MqarInstance draw(CounterRng& rng) const;
  int pairs() const { return pairs_; }
  int gap_space() const { return (context_ - 2 * pairs_) / 2; }
  int first_value() const { return vocab_ / 2; }
  bool answers_only() const { return answers_only_; }

 private:
  int vocab_, pairs_, context_;
  bool random_non_queries_, answers_only_;
  std::vector<double> gap_weight_;  // gap_weight_[g] = (g + 1)^(a - 1), g = 0..space-1 (the factor a cancels)
};

}  // namespace canonlab
