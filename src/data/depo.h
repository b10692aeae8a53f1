#pragma once
// Depo (reasoning depth): k-hop successor queries on one shuffled directed n-cycle.
//   <bos> x1 y1 .. xn yn <query_k1> q1 <ans> a1 .. <query_kt> qt <ans> at
// Edges x -> y of one random n-cycle in shuffled order; a_j is the k_j-th successor of q_j; t = min(queries, n).
// Tokens: names [0, 2V) (last name token in [V, 2V)), then <bos>, <ans>, <query_1> .. <query_K>.
// Training: n in 3..N with p(n) ~ 1/(n + sqrt(N)), k uniform in 1..K. Evaluation suites: n = N with every k = K
// (depo_acc_k_max) and every k = K/2 (depo_acc_k_half), accuracy over all answer tokens; when K/2 > 1 also every
// k = 1 (depo_acc_k1), so a K = 4 run reports k = 1, 2, 4. Each suite has its own held-out stream, so adding the
// third suite leaves the first two (and every K <= 3 run) unchanged.
#include <algorithm>

#include "data/packing.h"

namespace canonlab {

struct DepoInstance {
  std::vector<std::vector<int>> names;  // names[v] for vertex v
  std::vector<int> successor;           // successor[v] on the cycle
  std::vector<std::pair<int, int>> edges;                 // (x, successor[x]) in listed order
  std::vector<std::pair<int, int>> queries;               // (vertex, k)
  Instance tokens;
};

class DepoTask final : public PackedTask {
 public:
  explicit DepoTask(const TaskConfig& cfg);
  std::string name() const override { return "depo"; }
  int vocab_size() const override { return first_query_token() + k_max_; }
  int seq_len() const override { return context_; }
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override;
  std::vector<std::string> eval_suites() const override;
  Instance make_instance(CounterRng& rng, int suite) const override { return draw(rng, suite).tokens; }
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;

  // One instance with its structure, for tests: n vertices (0 = drawn), every query with hop k (0 = drawn).
  DepoInstance draw(CounterRng& rng, int suite) const;
  DepoInstance draw_with(CounterRng& rng, int n, int k) const;
  int bos() const { return 2 * name_vocab_; }
  int ans() const { return bos() + 1; }
  int query_token(int k) const { return first_query_token() + k - 1; }
  int k_max() const { return k_max_; }
  int n_max() const { return n_max_; }
  int longest_instance() const;

 private:
  int first_query_token() const { return bos() + 2; }
  bool has_k1_suite() const { return k_max_ / 2 > 1; }
  int suite_hops(int suite) const { return suite == 0 ? k_max_ : suite == 1 ? std::max(1, k_max_ / 2) : 1; }
  int n_max_, k_max_, name_vocab_, len_min_, len_max_, queries_, context_;
  bool answers_only_;
};

}  // namespace canonlab
