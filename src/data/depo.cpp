#include "data/depo.h"

#include <numeric>

#include "engine/error.h"

namespace canonlab {

DepoTask::DepoTask(const TaskConfig& cfg)
    : n_max_(cfg.depo.n_max), k_max_(cfg.depo.k_max), name_vocab_(cfg.depo.name_vocab),
      len_min_(cfg.depo.name_len_min), len_max_(cfg.depo.name_len_max), queries_(cfg.depo.queries),
      context_(cfg.context > 0 ? cfg.context : 2048), answers_only_(loss_on_answers(cfg)) {
  CANONLAB_CHECK(len_max_ >= len_min_, "task.depo.name_len_max: " + std::to_string(len_max_) +
                                           " is below task.depo.name_len_min = " + std::to_string(len_min_));
  const int64_t space = multi_token_name_space(name_vocab_, len_min_, len_max_);
  CANONLAB_CHECK(space >= n_max_, "task.depo.n_max: " + std::to_string(n_max_) + " vertices need distinct names, but names of " +
                                      std::to_string(len_min_) + ".." + std::to_string(len_max_) + " tokens over task.depo.name_vocab = " +
                                      std::to_string(name_vocab_) + " give only " + std::to_string(space));
  CANONLAB_CHECK(longest_instance() <= context_,
                 "task.context: " + std::to_string(context_) + " cannot hold a Depo instance with n = task.depo.n_max = " +
                     std::to_string(n_max_) + " (up to " + std::to_string(longest_instance()) +
                     " tokens; the first instance of a window is never cut); allowed: >= " + std::to_string(longest_instance()));
}

int DepoTask::longest_instance() const {
  const int t = std::min(queries_, n_max_);
  return 1 + 2 * n_max_ * len_max_ + t * (2 + 2 * len_max_);
}

DepoInstance DepoTask::draw(CounterRng& rng, int suite) const {
  if (suite == kTrainingInstance) return draw_with(rng, 0, 0);
  return draw_with(rng, n_max_, suite_hops(suite));
}

std::vector<std::string> DepoTask::metric_names() const {
  if (has_k1_suite()) return {"depo_acc_k_max", "depo_acc_k_half", "depo_acc_k1"};
  return {"depo_acc_k_max", "depo_acc_k_half"};
}

std::vector<std::string> DepoTask::eval_suites() const {
  if (has_k1_suite()) return {"k_max", "k_half", "k1"};
  return {"k_max", "k_half"};
}

DepoInstance DepoTask::draw_with(CounterRng& rng, int n, int k) const {
  if (n == 0) n = sample_size_inverse_sqrt(rng, 3, n_max_);
  DepoInstance d;
  d.names = distinct_multi_token_names(rng, n, name_vocab_, len_min_, len_max_);
  // One n-cycle: visit the vertices in a random order and link each to the next.
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  shuffle(std::span(order), rng);
  d.successor.assign(size_t(n), 0);
  for (int i = 0; i < n; i++) d.successor[size_t(order[size_t(i)])] = order[size_t((i + 1) % n)];
  std::vector<int> listed(static_cast<size_t>(n));
  std::iota(listed.begin(), listed.end(), 0);
  shuffle(std::span(listed), rng);
  for (int x : listed) d.edges.emplace_back(x, d.successor[size_t(x)]);

  // Queries on distinct vertices.
  const int t = std::min(queries_, n);
  std::vector<int> pool(static_cast<size_t>(n));
  std::iota(pool.begin(), pool.end(), 0);
  for (int i = 0; i < t; i++) {
    std::swap(pool[size_t(i)], pool[size_t(i) + rng.below(uint64_t(n - i))]);
    const int hops = k > 0 ? k : 1 + int(rng.below(uint64_t(k_max_)));
    d.queries.emplace_back(pool[size_t(i)], hops);
  }

  Instance& inst = d.tokens;
  const bool all = !answers_only_;
  inst.push(bos(), all);
  push_edge_list(inst, d.names, d.edges, all);
  for (auto [q, hops] : d.queries) {
    inst.push(query_token(hops), all);
    for (int tok : d.names[size_t(q)]) inst.push(tok, all);
    inst.push(ans(), true);
    int a = q;
    for (int h = 0; h < hops; h++) a = d.successor[size_t(a)];
    for (int tok : d.names[size_t(a)]) inst.push(tok, true, true);
  }
  return d;
}

void DepoTask::score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const {
  score_argmax_accuracy(batch, logits, vocab_size(), metric_names()[size_t(suite)], sums);
}

std::string DepoTask::token_text(int token) const {
  if (token == bos()) return "<bos>";
  if (token == ans()) return "<ans>";
  if (token >= first_query_token() && token < vocab_size()) return "<query_" + std::to_string(token - first_query_token() + 1) + ">";
  if (token >= name_vocab_ && token < 2 * name_vocab_) return "v" + std::to_string(token - name_vocab_) + "|";
  return "v" + std::to_string(token);
}

}  // namespace canonlab
