// Brevo: DAG shape and degree bounds, the reference answer and the validity checker, packing, determinism and the
// generative evaluation with fake samplers. Brevo1 (one-token names, N = 20) and Brevo2 (V = 4, lengths 2..4, N = 12).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "data/brevo.h"

using namespace canonlab;

namespace {

TaskConfig brevo1_config() {
  TaskConfig cfg;
  cfg.name = "brevo";
  cfg.brevo.n_max = 20;
  return cfg;
}

TaskConfig brevo2_config() {
  TaskConfig cfg = brevo1_config();
  cfg.brevo.n_max = 12;
  cfg.brevo.name_vocab = 4;
  cfg.brevo.name_len_min = 2;
  cfg.brevo.name_len_max = 4;
  return cfg;
}

std::vector<TaskConfig> both_configs() { return {brevo1_config(), brevo2_config()}; }

std::string error_of(const TaskConfig& cfg) {
  try {
    BrevoTask task(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The answer tokens (names of `order`) followed by <eos>.
std::vector<int> answer_tokens(const BrevoTask& task, const BrevoInstance& d, const std::vector<int>& order) {
  std::vector<int> out;
  for (int v : order) out.insert(out.end(), d.names[size_t(v)].begin(), d.names[size_t(v)].end());
  out.push_back(task.eos());
  return out;
}

// Ancestors of v computed here from the edge list alone (independent of the generator's parent lists).
std::set<int> ancestors_from_edges(const BrevoInstance& d, int v) {
  std::set<int> seen;
  std::vector<int> stack = {v};
  while (!stack.empty()) {
    const int x = stack.back();
    stack.pop_back();
    for (auto [p, c] : d.edges)
      if (c == x && seen.insert(p).second) stack.push_back(p);
  }
  return seen;
}

// Solves a Brevo prompt from its tokens alone: splits names, reads edges and the query, and lists the ancestors
// in DFS post-order (a valid order that differs from the generator's Kahn order). corrupt: drop the first name.
std::vector<int> solve_prompt(const BrevoTask& task, const std::vector<int>& prompt, bool multi, int V, bool corrupt) {
  EXPECT_EQ(prompt.front(), task.bos());
  EXPECT_EQ(prompt.back(), task.ans());
  const auto q_at = std::find(prompt.begin(), prompt.end(), task.query_token());
  auto split = [&](auto first, auto last) {
    std::vector<std::vector<int>> names;
    std::vector<int> name;
    for (auto it = first; it != last; ++it) {
      name.push_back(*it);
      if (!multi || (*it >= V && *it < 2 * V)) names.push_back(name), name.clear();
    }
    EXPECT_TRUE(name.empty());
    return names;
  };
  const auto edge_names = split(prompt.begin() + 1, q_at);
  const auto query_names = split(q_at + 1, prompt.end() - 1);
  EXPECT_EQ(edge_names.size() % 2, 0u);
  EXPECT_EQ(query_names.size(), 1u);
  std::map<std::vector<int>, std::vector<std::vector<int>>> parents;
  for (size_t i = 0; i + 1 < edge_names.size(); i += 2) parents[edge_names[i + 1]].push_back(edge_names[i]);
  std::set<std::vector<int>> done;
  std::vector<std::vector<int>> order;
  std::function<void(const std::vector<int>&)> visit = [&](const std::vector<int>& v) {
    for (const auto& p : parents[v])
      if (done.insert(p).second) visit(p), order.push_back(p);
  };
  visit(query_names[0]);
  if (corrupt && !order.empty()) order.erase(order.begin());
  std::vector<int> out;
  for (const auto& name : order) out.insert(out.end(), name.begin(), name.end());
  out.push_back(task.eos());
  return out;
}

class FakeSampler final : public TokenSampler {
 public:
  FakeSampler(const BrevoTask& task, bool multi, int V, bool corrupt) : task_(task), multi_(multi), V_(V), corrupt_(corrupt) {}
  std::vector<std::vector<int>> continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                 const std::vector<int>& stop_tokens, double temperature,
                                                 uint64_t) override {
    calls++;
    seen_prompts = prompts;
    EXPECT_EQ(stop_tokens, std::vector<int>{task_.eos()});
    EXPECT_EQ(temperature, 0.0);
    std::vector<std::vector<int>> out;
    for (const auto& p : prompts) {
      out.push_back(solve_prompt(task_, p, multi_, V_, corrupt_));
      EXPECT_LE(int(out.back().size()), max_new);
    }
    return out;
  }
  int max_length() const override { return task_.seq_len(); }
  int calls = 0;
  std::vector<std::vector<int>> seen_prompts;

 private:
  const BrevoTask& task_;
  bool multi_;
  int V_;
  bool corrupt_;
};

}  // namespace

TEST(TaskBrevo, LayoutAndDefaults) {
  BrevoTask b1(brevo1_config());
  EXPECT_EQ(b1.bos(), 20);
  EXPECT_EQ(b1.vocab_size(), 24);
  EXPECT_EQ(b1.seq_len(), 1024);
  EXPECT_EQ(b1.token_text(b1.query_token()), "<query>");
  EXPECT_EQ(b1.token_text(b1.eos()), "<eos>");
  EXPECT_EQ(b1.metric_names(), std::vector<std::string>{"brevo_acc"});
  EXPECT_TRUE(b1.has_generation_eval());
  BrevoTask b2(brevo2_config());
  EXPECT_EQ(b2.bos(), 8);
  EXPECT_EQ(b2.vocab_size(), 12);
  EXPECT_EQ(b2.seq_len(), 1536);
  EXPECT_EQ(b2.token_text(5), "v1|");
  EXPECT_EQ(b2.token_text(3), "v3");
  // Paper sizes: Brevo1 N = 110 fits its 1024-token context; the bound counts min(4, i) parents for vertex i.
  TaskConfig paper = brevo1_config();
  paper.brevo.n_max = 110;
  EXPECT_EQ(BrevoTask(paper).longest_instance(), 1 + 2 * 430 + 3 + 109 + 1);
}

TEST(TaskBrevo, ConfigErrorsNameTheKey) {
  TaskConfig small = brevo1_config();
  small.context = 20;
  const BrevoTask reference(brevo1_config());
  const std::string bound = std::to_string(reference.shortest_full_instance());
  EXPECT_NE(error_of(small).find("task.context: 20"), std::string::npos);
  EXPECT_NE(error_of(small).find("allowed: >= " + bound), std::string::npos) << error_of(small);
  small.context = std::stoi(bound);
  EXPECT_EQ(error_of(small), "");
  // A window between the smallest and the largest n = N instance: longer instances are redrawn, never cut.
  small.context = (reference.shortest_full_instance() + reference.longest_instance()) / 3;
  const BrevoTask tight(small);
  for (uint64_t i = 0; i < 200; i++) {
    CounterRng rng = row_rng(1, 2, i);
    EXPECT_LE(tight.make_instance(rng, 0).size(), small.context);
  }

  TaskConfig few_names = brevo2_config();
  few_names.brevo.name_len_min = 1;
  few_names.brevo.name_len_max = 1;  // only 4 one-token names for 12 vertices
  EXPECT_NE(error_of(few_names).find("task.brevo.n_max: 12"), std::string::npos) << error_of(few_names);
  EXPECT_NE(error_of(few_names).find("task.brevo.name_vocab"), std::string::npos);

  TaskConfig bad_query = brevo1_config();
  bad_query.brevo.query_from = "first";
  EXPECT_NE(error_of(bad_query).find("task.brevo.query_from: 'first'"), std::string::npos);
  TaskConfig bad_lengths = brevo2_config();
  bad_lengths.brevo.name_len_max = 1;
  EXPECT_NE(error_of(bad_lengths).find("task.brevo.name_len_max: 1"), std::string::npos);
}

TEST(TaskBrevo, DagShapeAndDegreeBounds) {
  for (int degree : {1, 2, 4}) {
    for (int N : {3, 4, 5, 9, 20, 60}) {
      TaskConfig cfg = brevo1_config();
      cfg.brevo.n_max = N;
      cfg.brevo.max_degree = degree;
      BrevoTask task(cfg);
      std::set<int> leaf_counts;
      int max_in = 0, max_out = 0;
      for (int i = 0; i < 300; i++) {
        CounterRng rng(11, uint64_t(N * 10 + degree), uint64_t(i));
        const BrevoInstance d = task.draw_with(rng, i % 2 == 0 ? N : 0);
        const int n = d.n;
        ASSERT_GE(n, 3);
        ASSERT_LE(n, N);
        ASSERT_GE(d.leaves, 1);
        ASSERT_LE(d.leaves, (n - 1 + 3) / 4 + 1);
        if (n == N) leaf_counts.insert(d.leaves);
        std::vector<int> in(static_cast<size_t>(n), 0), out(static_cast<size_t>(n), 0);
        for (auto [p, c] : d.edges) {
          ASSERT_LT(p, c);  // parents come earlier in generation order: acyclic
          in[size_t(c)]++, out[size_t(p)]++;
        }
        for (int v = 0; v < n; v++) {
          ASSERT_LE(in[size_t(v)], degree);
          ASSERT_LE(out[size_t(v)], degree);
          ASSERT_EQ(in[size_t(v)] == 0, v < d.leaves) << "leaves are exactly the first L vertices";
          ASSERT_EQ(int(d.parents[size_t(v)].size()), in[size_t(v)]);
          max_in = std::max(max_in, in[size_t(v)]);
          max_out = std::max(max_out, out[size_t(v)]);
        }
        std::set<std::pair<int, int>> distinct(d.edges.begin(), d.edges.end());
        ASSERT_EQ(distinct.size(), d.edges.size());
        // The query is a non-leaf of the last quarter.
        ASSERT_GE(d.query, n * 3 / 4);
        ASSERT_GE(d.query, d.leaves);
      }
      // Every leaf count 1..ceil((N-1)/4)+1 occurs, and the degree bounds are reached (not loose).
      EXPECT_EQ(int(leaf_counts.size()), (N - 1 + 3) / 4 + 1) << "N " << N;
      if (N >= 20) {
        EXPECT_EQ(max_in, degree);
        EXPECT_EQ(max_out, degree);
      }
    }
  }
}

TEST(TaskBrevo, QueryFromLastQuarterOrLast) {
  for (std::string from : {"last_quarter", "last"}) {
    TaskConfig cfg = brevo1_config();
    cfg.brevo.query_from = from;
    BrevoTask task(cfg);
    std::set<int> positions;
    for (int i = 0; i < 200; i++) {
      CounterRng rng(5, 0, uint64_t(i));
      positions.insert(task.draw_with(rng, 20).query);
    }
    if (from == "last") EXPECT_EQ(positions, std::set<int>{19});
    else EXPECT_EQ(positions, (std::set<int>{15, 16, 17, 18, 19}));
  }
}

TEST(TaskBrevo, NamesAndTokensFollowTheFormat) {
  for (const TaskConfig& cfg : both_configs()) {
    BrevoTask task(cfg);
    const bool multi = cfg.brevo.name_vocab > 0;
    for (int i = 0; i < 100; i++) {
      CounterRng rng(3, 1, uint64_t(i));
      const BrevoInstance d = task.draw(rng, 0);
      ASSERT_EQ(d.n, cfg.brevo.n_max);
      std::set<std::vector<int>> distinct(d.names.begin(), d.names.end());
      ASSERT_EQ(int(distinct.size()), d.n);
      for (const auto& name : d.names) {
        ASSERT_GE(int(name.size()), multi ? 2 : 1);
        ASSERT_LE(int(name.size()), multi ? 4 : 1);
        for (size_t k = 0; k < name.size(); k++) {
          const bool last = k + 1 == name.size();
          const int lo = multi && last ? 4 : 0, hi = multi ? (last ? 8 : 4) : cfg.brevo.n_max;
          ASSERT_GE(name[k], lo);
          ASSERT_LT(name[k], hi);
        }
      }
      // Rebuild the exact token sequence and its loss / score flags from the structure.
      std::vector<int> expect = {task.bos()};
      for (auto [p, c] : d.edges) {
        expect.insert(expect.end(), d.names[size_t(p)].begin(), d.names[size_t(p)].end());
        expect.insert(expect.end(), d.names[size_t(c)].begin(), d.names[size_t(c)].end());
      }
      expect.push_back(task.query_token());
      expect.insert(expect.end(), d.names[size_t(d.query)].begin(), d.names[size_t(d.query)].end());
      expect.push_back(task.ans());
      ASSERT_EQ(d.prompt_length, int(expect.size()));
      const std::vector<int> answer = answer_tokens(task, d, d.answer);
      expect.insert(expect.end(), answer.begin(), answer.end());
      ASSERT_EQ(d.tokens.tokens, expect);
      for (int t = 0; t < d.tokens.size(); t++) {
        ASSERT_EQ(d.tokens.loss[size_t(t)], t >= d.prompt_length - 1 ? 1 : 0) << t;  // <ans>, answer, <eos>
        ASSERT_EQ(d.tokens.scored[size_t(t)], t >= d.prompt_length ? 1 : 0) << t;
      }
      ASSERT_LE(d.tokens.size(), task.longest_instance());
    }
  }
  // loss_on: all trains every token.
  TaskConfig all = brevo1_config();
  all.loss_on = "all";
  CounterRng rng(3, 1, 0);
  const BrevoInstance d = BrevoTask(all).draw(rng, -1);
  EXPECT_EQ(std::count(d.tokens.loss.begin(), d.tokens.loss.end(), 1), d.tokens.size());
}

TEST(TaskBrevo, ReferenceAnswerIsValidAndCorruptionsFail) {
  for (const TaskConfig& cfg : both_configs()) {
    BrevoTask task(cfg);
    const bool multi = cfg.brevo.name_vocab > 0;
    int swapped = 0, cut = 0;
    int several_orders = 0;  // instances where the 5 extra draws give more than one order
    for (int i = 0; i < 200; i++) {
      CounterRng rng(9, 2, uint64_t(i));
      const BrevoInstance d = task.draw(rng, i % 2 == 0 ? 0 : -1);
      const std::set<int> anc = ancestors_from_edges(d, d.query);
      ASSERT_EQ(std::set<int>(d.answer.begin(), d.answer.end()), anc);
      ASSERT_EQ(d.answer.size(), anc.size());
      ASSERT_FALSE(anc.empty());
      const std::vector<int> good = answer_tokens(task, d, d.answer);
      ASSERT_TRUE(task.answer_is_valid(d, good));
      // Other random topological orders are valid too, and there is more than one.
      std::set<std::vector<int>> orders;
      for (int k = 0; k < 5; k++) {
        CounterRng other(77, uint64_t(i), uint64_t(k));
        const std::vector<int> order = brevo_ancestor_order(d.parents, d.query, other);
        ASSERT_TRUE(task.answer_is_valid(d, answer_tokens(task, d, order)));
        orders.insert(order);
      }
      several_orders += orders.size() > 1;

      // Swap a parent with a later child of it.
      for (size_t a = 0; a < d.answer.size(); a++)
        for (size_t b = a + 1; b < d.answer.size(); b++) {
          const auto& pb = d.parents[size_t(d.answer[b])];
          if (std::find(pb.begin(), pb.end(), d.answer[a]) == pb.end()) continue;
          std::vector<int> order = d.answer;
          std::swap(order[a], order[b]);
          ASSERT_FALSE(task.answer_is_valid(d, answer_tokens(task, d, order)));
          swapped++;
        }
      // Drop one, duplicate one.
      std::vector<int> dropped = d.answer;
      dropped.erase(dropped.begin() + long(i % dropped.size()));
      ASSERT_FALSE(task.answer_is_valid(d, answer_tokens(task, d, dropped)));
      std::vector<int> doubled = d.answer;
      doubled.push_back(doubled.back());
      ASSERT_FALSE(task.answer_is_valid(d, answer_tokens(task, d, doubled)));
      // Add a non-ancestor at the end (where the order stays valid): the query itself, or any other.
      std::vector<int> with_query = d.answer;
      with_query.push_back(d.query);
      ASSERT_FALSE(task.answer_is_valid(d, answer_tokens(task, d, with_query)));
      for (int v = 0; v < d.n; v++)
        if (v != d.query && !anc.count(v)) {
          std::vector<int> extra = d.answer;
          extra.push_back(v);
          ASSERT_FALSE(task.answer_is_valid(d, answer_tokens(task, d, extra)));
          break;
        }
      // No <eos>, something after <eos>, a special token inside, an empty generation.
      std::vector<int> no_eos = good;
      no_eos.pop_back();
      ASSERT_FALSE(task.answer_is_valid(d, no_eos));
      std::vector<int> trailing = good;
      trailing.push_back(task.eos());
      ASSERT_FALSE(task.answer_is_valid(d, trailing));
      std::vector<int> special = good;
      special.insert(special.begin(), task.ans());
      ASSERT_FALSE(task.answer_is_valid(d, special));
      ASSERT_FALSE(task.answer_is_valid(d, {}));
      ASSERT_FALSE(task.answer_is_valid(d, {task.eos()}));
      // Multi-token names: cut a name (drop its first or last token).
      if (multi) {
        const std::vector<int>& first_name = d.names[size_t(d.answer[0])];
        std::vector<int> no_head(good.begin() + 1, good.end());
        ASSERT_FALSE(task.answer_is_valid(d, no_head));
        std::vector<int> no_tail = good;
        no_tail.erase(no_tail.begin() + long(first_name.size()) - 1);
        ASSERT_FALSE(task.answer_is_valid(d, no_tail));
        std::vector<int> last_cut = good;
        last_cut.erase(last_cut.end() - 2);  // the final name loses its end token: an unfinished name before <eos>
        ASSERT_FALSE(task.answer_is_valid(d, last_cut));
        cut++;
      }
    }
    EXPECT_GT(swapped, 50);
    EXPECT_EQ(cut, multi ? 200 : 0);
    EXPECT_GT(several_orders, 50);
  }
}

TEST(TaskBrevo, DeterministicPerSeedStreamIndex) {
  for (const TaskConfig& cfg : both_configs()) {
    BrevoTask task(cfg);
    const Batch a = task.make_batch(4, 21, 5), b = task.make_batch(4, 21, 5);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.loss_mask, b.loss_mask);
    EXPECT_NE(task.make_batch(4, 21, 6).tokens, a.tokens);
    EXPECT_NE(task.make_batch(4, 22, 5).tokens, a.tokens);
    EXPECT_NE(std::vector<int>(a.tokens.begin(), a.tokens.begin() + a.T),
              std::vector<int>(a.tokens.begin() + a.T, a.tokens.begin() + 2 * a.T));
    // A row is a function of (seed, stream, index) alone: row 2 of a 4-row batch = row 0 of a batch filled at index 2.
    Batch single;
    single.resize(1, task.seq_len());
    task.sample(single, 0, 21, 5, 2);
    EXPECT_EQ(std::vector<int>(single.tokens.begin(), single.tokens.end()),
              std::vector<int>(a.tokens.begin() + 2 * a.T, a.tokens.begin() + 3 * a.T));
  }
}

TEST(TaskBrevo, PackingKeepsTheFirstInstanceWhole) {
  for (const TaskConfig& cfg : both_configs()) {
    BrevoTask task(cfg);
    const Batch batch = task.make_batch(8, 4, 3);
    const int T = batch.T;
    int answer_positions = 0;
    for (int r = 0; r < batch.B; r++) {
      CounterRng rng = row_rng(4, 3, uint64_t(r));
      const BrevoInstance first = task.draw(rng, PackedTask::kTrainingInstance);
      const int len = first.tokens.size();
      ASSERT_EQ(batch.tokens[size_t(r) * T], task.bos());
      ASSERT_LE(len, T);
      for (int t = 0; t < len; t++) ASSERT_EQ(batch.tokens[size_t(r) * T + t], first.tokens.tokens[size_t(t)]);
      // The window continues with the next instance, and the first instance's answer is trained and scored.
      if (len < T) {
        ASSERT_EQ(batch.tokens[size_t(r) * T + len], task.bos());
      }
      for (int t = 0; t + 1 < len; t++) {
        const float expect = t + 1 >= first.prompt_length - 1 ? 1.f : 0.f;
        ASSERT_EQ(batch.loss_mask[size_t(r) * T + t], expect);
        ASSERT_EQ(batch.targets[size_t(r) * T + t], first.tokens.tokens[size_t(t + 1)]);
        answer_positions += batch.score_mask[size_t(r) * T + t] != 0.f;
      }
    }
    EXPECT_GT(answer_positions, 8);
  }
}

TEST(TaskBrevo, GenerationEvalScoresCorrectAndCorruptedSamplers) {
  for (const TaskConfig& cfg : both_configs()) {
    BrevoTask task(cfg);
    const bool multi = cfg.brevo.name_vocab > 0;
    FakeSampler right(task, multi, cfg.brevo.name_vocab, false), wrong(task, multi, cfg.brevo.name_vocab, true);
    MetricSums good, bad;
    task.score_generation(right, 123, 40, good);
    task.score_generation(wrong, 123, 40, bad);
    EXPECT_EQ(right.calls, 1);
    EXPECT_EQ(good["brevo_acc"].count, 40);
    EXPECT_EQ(good["brevo_acc"].sum, 40);
    EXPECT_EQ(bad["brevo_acc"].count, 40);
    EXPECT_EQ(bad["brevo_acc"].sum, 0);
    // Prompts are n = N instances up to <ans>, the same for the same seed and different for another.
    ASSERT_EQ(right.seen_prompts.size(), 40u);
    for (int i = 0; i < 40; i++) {
      const BrevoInstance d = task.generation_instance(123, i);
      EXPECT_EQ(d.n, cfg.brevo.n_max);
      EXPECT_EQ(right.seen_prompts[size_t(i)],
                std::vector<int>(d.tokens.tokens.begin(), d.tokens.tokens.begin() + d.prompt_length));
    }
    EXPECT_EQ(right.seen_prompts, wrong.seen_prompts);
    FakeSampler other(task, multi, cfg.brevo.name_vocab, false);
    MetricSums ignored;
    task.score_generation(other, 124, 40, ignored);
    EXPECT_NE(other.seen_prompts, right.seen_prompts);
  }
}
