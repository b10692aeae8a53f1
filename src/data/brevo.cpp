#include "data/brevo.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "engine/error.h"

namespace canonlab {

namespace {

// The most edges an n-vertex DAG of this generator can have: vertex i has at most min(max_degree, i) parents.
int most_edges(int n, int max_degree) {
  int m = 0;
  for (int i = 1; i < n; i++) m += std::min(max_degree, i);
  return m;
}

// Generation stream of score_generation, away from the teacher-forced evaluation streams.
constexpr uint64_t kGenerationStream = kHeldOutStream + (uint64_t(1) << 40);

}  // namespace

BrevoTask::BrevoTask(const TaskConfig& cfg)
    : n_max_(cfg.brevo.n_max), name_vocab_(cfg.brevo.name_vocab), len_min_(cfg.brevo.name_len_min),
      len_max_(cfg.brevo.name_len_max), max_degree_(cfg.brevo.max_degree),
      context_(cfg.context > 0 ? cfg.context : (cfg.brevo.name_vocab > 0 ? 1536 : 1024)),
      query_last_(cfg.brevo.query_from == "last"), answers_only_(loss_on_answers(cfg)) {
  CANONLAB_CHECK(n_max_ >= 3, "task.brevo.n_max: " + std::to_string(n_max_) + "; allowed: >= 3");
  CANONLAB_CHECK(max_degree_ >= 1, "task.brevo.max_degree: " + std::to_string(max_degree_) + "; allowed: >= 1");
  CANONLAB_CHECK(cfg.brevo.query_from == "last_quarter" || cfg.brevo.query_from == "last",
                 "task.brevo.query_from: '" + cfg.brevo.query_from + "'; allowed: last_quarter, last");
  CANONLAB_CHECK(name_vocab_ >= 0, "task.brevo.name_vocab: " + std::to_string(name_vocab_) +
                                       "; allowed: 0 (one-token names) or >= 1");
  if (name_vocab_ > 0) {
    CANONLAB_CHECK(len_min_ >= 1, "task.brevo.name_len_min: " + std::to_string(len_min_) + "; allowed: >= 1");
    CANONLAB_CHECK(len_max_ >= len_min_, "task.brevo.name_len_max: " + std::to_string(len_max_) +
                                             " is below task.brevo.name_len_min = " + std::to_string(len_min_));
    const int64_t space = multi_token_name_space(name_vocab_, len_min_, len_max_);
    CANONLAB_CHECK(space >= n_max_, "task.brevo.n_max: " + std::to_string(n_max_) +
                                        " vertices need distinct names, but names of " + std::to_string(len_min_) +
                                        ".." + std::to_string(len_max_) + " tokens over task.brevo.name_vocab = " +
                                        std::to_string(name_vocab_) + " give only " + std::to_string(space) +
                                        "; raise task.brevo.name_vocab or task.brevo.name_len_max");
  }
  // The worst case (every vertex with max_degree parents, every name max length) is far above what DAGs drawn by the
  // paper's rule reach (N = 50 Brevo2: bound 1724, largest of 20,000 draws 1037, the paper's window 1536). So the
  // window must hold the smallest n = N instance, and draw() redraws the rare instance longer than the window.
  CANONLAB_CHECK(shortest_full_instance() <= context_,
                 "task.context: " + std::to_string(context_) + " cannot hold even the smallest Brevo instance with n = "
                 "task.brevo.n_max = " + std::to_string(n_max_) + " (" + std::to_string(shortest_full_instance()) +
                 " tokens; the first instance of a window is never cut); allowed: >= " +
                 std::to_string(shortest_full_instance()) + " (the largest instance takes up to " +
                 std::to_string(longest_instance()) + ")");
}

int BrevoTask::shortest_full_instance() const {
  // Most leaves, one parent for every other vertex, shortest names, a one-vertex answer.
  const int leaves = (n_max_ - 1 + 3) / 4 + 1;
  const int len = name_vocab_ > 0 ? len_min_ : 1;
  return 1 + 2 * (n_max_ - leaves) * len + 1 + len + 1 + len + 1;
}

int BrevoTask::longest_instance() const {
  // <bos>, every edge as two names, <query> q <ans>, at most N - 1 answer names, <eos>.
  const int len = name_len_max();
  return 1 + 2 * most_edges(n_max_, max_degree_) * len + 1 + len + 1 + (n_max_ - 1) * len + 1;
}

std::vector<int> brevo_ancestor_order(const std::vector<std::vector<int>>& parents, int query, CounterRng& rng) {
  const int n = int(parents.size());
  // The ancestor subgraph (query included), then each member's children within it.
  std::vector<uint8_t> in_sub(static_cast<size_t>(n), 0);
  std::vector<int> stack = {query};
  in_sub[size_t(query)] = 1;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int p : parents[size_t(v)])
      if (!in_sub[size_t(p)]) in_sub[size_t(p)] = 1, stack.push_back(p);
  }
  std::vector<int> children_left(static_cast<size_t>(n), 0);
  for (int v = 0; v < n; v++)
    if (in_sub[size_t(v)])
      for (int p : parents[size_t(v)]) children_left[size_t(p)]++;
  // Kahn from the query: a vertex is ready once all its children are placed; the reversed order puts parents first.
  std::vector<int> ready = {query}, order;
  while (!ready.empty()) {
    const size_t pick = rng.below(ready.size());
    const int v = ready[pick];
    ready[pick] = ready.back();
    ready.pop_back();
    order.push_back(v);
    for (int p : parents[size_t(v)])
      if (--children_left[size_t(p)] == 0) ready.push_back(p);
  }
  std::reverse(order.begin(), order.end());
  order.pop_back();  // the query itself is not part of the answer
  return order;
}

BrevoInstance BrevoTask::draw(CounterRng& rng, int suite) const {
  for (;;) {
    BrevoInstance d = draw_with(rng, suite == kTrainingInstance ? 0 : n_max_);
    if (d.tokens.size() <= context_) return d;
  }
}

BrevoInstance BrevoTask::draw_with(CounterRng& rng, int n) const {
  if (n == 0) n = sample_size_inverse_sqrt(rng, 3, n_max_);
  BrevoInstance d;
  d.n = n;

  // Names, independent of the generation order (the paper's renaming step).
  if (name_vocab_ > 0) {
    d.names = distinct_multi_token_names(rng, n, name_vocab_, len_min_, len_max_);
  } else {
    std::vector<int> pool(static_cast<size_t>(n_max_));
    std::iota(pool.begin(), pool.end(), 0);
    partial_shuffle(std::span(pool), size_t(n), rng);
    for (int i = 0; i < n; i++) d.names.push_back({pool[size_t(i)]});
  }

  // The DAG: leaves first, then each vertex picks its parents among earlier vertices with spare out-degree.
  // There is always a candidate: every vertex adds max_degree free out-slots and uses at most max_degree.
  d.leaves = 1 + int(rng.below(uint64_t((n - 1 + 3) / 4 + 1)));
  d.parents.assign(size_t(n), {});
  std::vector<int> out_degree(static_cast<size_t>(n), 0);
  std::vector<int> candidates;
  for (int v = d.leaves; v < n; v++) {
    candidates.clear();
    for (int u = 0; u < v; u++)
      if (out_degree[size_t(u)] < max_degree_) candidates.push_back(u);
    const int count = 1 + int(rng.below(uint64_t(std::min(max_degree_, int(candidates.size())))));
    partial_shuffle(std::span(candidates), size_t(count), rng);
    for (int i = 0; i < count; i++) {
      const int p = candidates[size_t(i)];
      d.parents[size_t(v)].push_back(p);
      out_degree[size_t(p)]++;
    }
  }

  // The query: a non-leaf of the last quarter (the last vertex is never a leaf: L <= n - 1 for n >= 3).
  const int first = query_last_ ? n - 1 : std::max(n * 3 / 4, d.leaves);
  d.query = first + int(rng.below(uint64_t(n - first)));
  d.answer = brevo_ancestor_order(d.parents, d.query, rng);

  for (int v = 0; v < n; v++)
    for (int p : d.parents[size_t(v)]) d.edges.emplace_back(p, v);
  shuffle(std::span(d.edges), rng);

  Instance& inst = d.tokens;
  const bool all = !answers_only_;
  inst.push(bos(), all);
  push_edge_list(inst, d.names, d.edges, all);
  inst.push(query_token(), all);
  for (int tok : d.names[size_t(d.query)]) inst.push(tok, all);
  inst.push(ans(), true);
  d.prompt_length = inst.size();
  for (int v : d.answer)
    for (int tok : d.names[size_t(v)]) inst.push(tok, true, true);
  inst.push(eos(), true, true);
  return d;
}

bool BrevoTask::answer_is_valid(const BrevoInstance& inst, const std::vector<int>& generated) const {
  if (generated.empty() || generated.back() != eos()) return false;
  std::map<std::vector<int>, int> vertex_of;
  for (int v = 0; v < inst.n; v++) vertex_of[inst.names[size_t(v)]] = v;
  // Split the names (Brevo2: at end tokens); any special token, or a name cut short before <eos>, fails.
  std::vector<int> listed, name;
  for (size_t i = 0; i + 1 < generated.size(); i++) {
    const int tok = generated[i];
    if (tok < 0 || tok >= name_tokens()) return false;
    name.push_back(tok);
    if (!is_name_end(tok)) continue;
    auto it = vertex_of.find(name);
    if (it == vertex_of.end()) return false;
    listed.push_back(it->second);
    name.clear();
  }
  if (!name.empty()) return false;

  // Exactly the ancestors, each once, each after all of its parents (parents of ancestors are ancestors).
  std::vector<uint8_t> ancestor(static_cast<size_t>(inst.n), 0), placed(static_cast<size_t>(inst.n), 0);
  std::vector<int> stack = {inst.query};
  int ancestors = 0;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int p : inst.parents[size_t(v)])
      if (!ancestor[size_t(p)]) ancestor[size_t(p)] = 1, ancestors++, stack.push_back(p);
  }
  if (int(listed.size()) != ancestors) return false;
  for (int v : listed) {
    if (!ancestor[size_t(v)] || placed[size_t(v)]) return false;
    for (int p : inst.parents[size_t(v)])
      if (!placed[size_t(p)]) return false;
    placed[size_t(v)] = 1;
  }
  return true;
}

BrevoInstance BrevoTask::generation_instance(uint64_t seed, int i) const {
  CounterRng rng = row_rng(seed, kGenerationStream, uint64_t(i));
  return draw(rng, 0);
}

void BrevoTask::score_generation(TokenSampler& sampler, uint64_t seed, int count, MetricSums& sums) const {
  std::vector<BrevoInstance> problems;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < count; i++) {
    problems.push_back(generation_instance(seed, i));
    const std::vector<int>& t = problems.back().tokens.tokens;
    prompts.emplace_back(t.begin(), t.begin() + problems.back().prompt_length);
  }
  const std::vector<std::vector<int>> outputs = sampler.continue_prompts(prompts, longest_answer(), {eos()}, 0.0, seed);
  MetricSum& acc = sums["brevo_acc"];
  for (int i = 0; i < count; i++) acc.add(answer_is_valid(problems[size_t(i)], outputs[size_t(i)]) ? 1.0 : 0.0);
}

std::string BrevoTask::token_text(int token) const {
  if (token == bos()) return "<bos>";
  if (token == query_token()) return "<query>";
  if (token == ans()) return "<ans>";
  if (token == eos()) return "<eos>";
  if (name_vocab_ > 0 && token >= name_vocab_ && token < 2 * name_vocab_) return "v" + std::to_string(token - name_vocab_) + "|";
  return "v" + std::to_string(token);
}

}  // namespace canonlab
