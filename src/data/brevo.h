#pragma once
// Brevo (reasoning breadth): list every vertex a query vertex depends on, recursively, in topological order.
//   <bos> x1 y1 .. xm ym <query> q <ans> a1 .. ap <eos>
// e.g. (Brevo1, N = 8, a real draw):
//   <bos> v6 v7 v1 v5 v7 v0 v4 v5 v1 v2 v2 v6 v1 v6 v5 v6 v3 v5 v3 v6 v4 v0 <query> v7 <ans> v3 v1 v4 v2 v5 v6 <eos>
// An edge x -> y means y depends on x (x is a parent of y). Edges are listed in random order. The answer a1..ap is
// the set of all ancestors of q (q excluded), each after all of its parents, so leaves come first.
// DAG (paper App A.2): vertices 0..n-1 in generation order; the first L are leaves, L uniform in
// 1..ceil((n-1)/4)+1; each later vertex takes 1..max_degree parents (count uniform, capped by the candidates)
// uniformly among earlier vertices with out-degree < max_degree, so in- and out-degrees are <= max_degree. The
// query is a non-leaf of the last quarter (query_from = last_quarter) or the last vertex (query_from = last).
// Names are drawn independently of the generation order, which is the paper's final renaming.
// Tokens: names first (Brevo1, name_vocab = 0: one token per vertex, distinct in [0, N); Brevo2, name_vocab = V:
// name_len_min..name_len_max tokens, non-final in [0, V), final in [V, 2V)), then <bos>, <query>, <ans>, <eos>.
// Training: n in 3..N with p(n) ~ 1/(n + sqrt(N)); loss on <ans>, the answer and <eos> (loss_on: all = every
// token). Evaluation: n = N; the model generates the answer after <ans> (greedy) and brevo_acc is the fraction of
// generations that answer_is_valid accepts. No partial credit; teacher-forced scoring is not used, since many
// orders are valid and the forced reference order says nothing about the others.
#include "data/packing.h"

namespace canonlab {

struct BrevoInstance {
  int n = 0;
  int leaves = 0;                                // vertices 0..leaves-1 have no parents
  std::vector<std::vector<int>> names;           // names[v]: the tokens of vertex v
  std::vector<std::vector<int>> parents;         // parents[v]: the vertices v depends on
  std::vector<std::pair<int, int>> edges;        // (parent, child) in listed order
  int query = 0;
  std::vector<int> answer;                       // the reference answer: ancestors of query, parents first
  Instance tokens;
  int prompt_length = 0;                         // tokens up to and including <ans>
};

// All ancestors of `query` (query excluded) in a random topological order, parents first: the released
// generator's randomized Kahn sort, run from the query towards the leaves (a vertex is ready once all of its
// children in the ancestor subgraph are placed; a uniform ready vertex is placed next) and then reversed.
std::vector<int> brevo_ancestor_order(const std::vector<std::vector<int>>& parents, int query, CounterRng& rng);

class BrevoTask final : public PackedTask {
 public:
  explicit BrevoTask(const TaskConfig& cfg);
  std::string name() const override { return "brevo"; }
  int vocab_size() const override { return eos() + 1; }
  int seq_len() const override { return context_; }
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override { return {"brevo_acc"}; }
  // Suite 0 (the default single suite) draws n = N: the held-out loss is measured at the evaluation size.
  Instance make_instance(CounterRng& rng, int suite) const override { return draw(rng, suite).tokens; }
  // Nothing: a teacher-forced token accuracy against one reference order is not a Brevo metric (see above).
  void score(const Batch&, const float*, int, MetricSums&) const override {}
  bool has_generation_eval() const override { return true; }
  // `count` instances with n = N drawn from `seed`; each prompt ends with <ans>; brevo_acc = fraction valid.
  void score_generation(TokenSampler& sampler, uint64_t seed, int count, MetricSums& sums) const override;

  // One instance with its structure: training size (suite < 0) or n = N; draw_with takes n (0 = drawn).
  BrevoInstance draw(CounterRng& rng, int suite) const;
  BrevoInstance draw_with(CounterRng& rng, int n) const;
  // True iff `generated` (the tokens after <ans>) is names then <eos> and nothing else, names exactly the
  // ancestors of the query without repeats, and lists every vertex after all of its parents.
  bool answer_is_valid(const BrevoInstance& inst, const std::vector<int>& generated) const;
  // The prompts score_generation sends, for tests: instance i of the evaluation drawn from `seed`.
  BrevoInstance generation_instance(uint64_t seed, int i) const;

  int name_tokens() const { return name_vocab_ > 0 ? 2 * name_vocab_ : n_max_; }
  int bos() const { return name_tokens(); }
  int query_token() const { return bos() + 1; }
  int ans() const { return bos() + 2; }
  int eos() const { return bos() + 3; }
  int n_max() const { return n_max_; }
  int max_degree() const { return max_degree_; }
  int name_len_max() const { return name_vocab_ > 0 ? len_max_ : 1; }
  int longest_instance() const;  // an upper bound on the tokens of an n = N instance
  int shortest_full_instance() const;  // the fewest tokens an n = N instance can have
  int longest_answer() const { return (n_max_ - 1) * name_len_max() + 1; }  // answer names and <eos>

 private:
  bool is_name_end(int token) const { return name_vocab_ > 0 ? token >= name_vocab_ && token < 2 * name_vocab_ : token < n_max_; }
  int n_max_, name_vocab_, len_min_, len_max_, max_degree_, context_;
  bool query_last_, answers_only_;
};

}  // namespace canonlab
