// Depo and Mano generators, checked against an independent reading of their own token streams, and the packing
// shared by every packed task.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "data/depo.h"
#include "data/mano.h"

using namespace canonlab;

namespace {

TaskConfig depo_config(int n_max, int k_max, int vocab, int len_min, int len_max, int context) {
  TaskConfig c;
  c.name = "depo";
  c.context = context;
  c.depo.n_max = n_max;
  c.depo.k_max = k_max;
  c.depo.name_vocab = vocab;
  c.depo.name_len_min = len_min;
  c.depo.name_len_max = len_max;
  return c;
}

// Reads one Depo instance back from tokens, using only the format: names end with a token in [V, 2V).
struct ParsedDepo {
  std::map<std::vector<int>, std::vector<int>> successor;  // edge x -> y, by name
  std::vector<std::vector<int>> edge_sources;
  struct Query {
    int k;
    std::vector<int> name, answer;
  };
  std::vector<Query> queries;
};

ParsedDepo parse_depo(const DepoTask& task, const int* tok, int len, int V) {
  ParsedDepo p;
  int i = 0;
  EXPECT_EQ(tok[i++], task.bos());
  auto read_name = [&] {
    std::vector<int> name;
    while (i < len) {
      const int t = tok[i++];
      name.push_back(t);
      EXPECT_LT(t, 2 * V) << "a name token is out of the name range";
      if (t >= V) break;
    }
    return name;
  };
  while (i < len && tok[i] < 2 * V) {
    std::vector<int> x = read_name(), y = read_name();
    EXPECT_TRUE(p.successor.emplace(x, y).second) << "a vertex has two outgoing edges";
    p.edge_sources.push_back(x);
  }
  while (i < len && tok[i] != task.bos()) {
    ParsedDepo::Query q;
    q.k = tok[i++] - task.query_token(1) + 1;
    q.name = read_name();
    EXPECT_EQ(tok[i++], task.ans());
    q.answer = read_name();
    p.queries.push_back(q);
  }
  return p;
}

}  // namespace

TEST(TaskDepo, EdgesFormOneCycleAndEveryAnswerIsTheKthSuccessor) {
  for (auto [len_min, len_max, vocab] : {std::tuple{1, 2, 50}, std::tuple{5, 7, 4}, std::tuple{1, 1, 30}}) {
    DepoTask task(depo_config(25, 8, vocab, len_min, len_max, 0));
    int instances = 0, queries = 0;
    for (uint64_t index = 0; index < 60; index++) {
      CounterRng rng = row_rng(3, 5, index);
      const DepoInstance d = task.draw(rng, PackedTask::kTrainingInstance);
      const Instance& inst = d.tokens;
      const ParsedDepo p = parse_depo(task, inst.tokens.data(), inst.size(), vocab);
      const int n = int(p.successor.size());
      ASSERT_GE(n, 3);
      ASSERT_LE(n, 25);
      // One n-cycle: following successors from any vertex returns after exactly n steps, visiting everyone.
      std::set<std::vector<int>> seen;
      std::vector<int> v = p.edge_sources[0];
      for (int s = 0; s < n; s++) {
        ASSERT_TRUE(seen.insert(v).second) << "cycle shorter than n";
        ASSERT_TRUE(p.successor.count(v)) << "a successor without an outgoing edge";
        v = p.successor.at(v);
      }
      EXPECT_EQ(v, p.edge_sources[0]);
      EXPECT_EQ(int(p.queries.size()), std::min(10, n));
      for (const auto& q : p.queries) {
        ASSERT_GE(q.k, 1);
        ASSERT_LE(q.k, 8);
        std::vector<int> a = q.name;
        for (int h = 0; h < q.k; h++) a = p.successor.at(a);
        EXPECT_EQ(q.answer, a);
        for (int t : q.name) EXPECT_GE(t, 0);
        EXPECT_GE(int(q.name.size()), len_min);
        EXPECT_LE(int(q.name.size()), len_max);
        queries++;
      }
      instances++;
    }
    EXPECT_EQ(instances, 60);
    EXPECT_GT(queries, 200);
  }
}

TEST(TaskDepo, LossAndScoreMarkTheAnswersOnly) {
  DepoTask task(depo_config(10, 4, 20, 1, 2, 0));
  CounterRng rng = row_rng(1, 2, 3);
  const Instance inst = task.draw(rng, PackedTask::kTrainingInstance).tokens;
  for (int i = 0; i < inst.size(); i++) {
    const bool after_ans = i > 0 && (inst.tokens[size_t(i - 1)] == task.ans() || (inst.scored[size_t(i - 1)] && inst.tokens[size_t(i - 1)] < 20));
    const bool is_ans = inst.tokens[size_t(i)] == task.ans();
    EXPECT_EQ(bool(inst.loss[size_t(i)]), is_ans || after_ans) << "position " << i;
    EXPECT_EQ(bool(inst.scored[size_t(i)]), after_ans) << "position " << i;
  }
}

TEST(TaskDepo, EvaluationSuitesUseNEqualsNAndFixedHops) {
  DepoTask task(depo_config(20, 8, 50, 1, 2, 0));
  ASSERT_EQ(task.eval_suites().size(), 3u);
  EXPECT_EQ(task.metric_names(), (std::vector<std::string>{"depo_acc_k_max", "depo_acc_k_half", "depo_acc_k1"}));
  for (int suite : {0, 1, 2}) {
    CounterRng rng = row_rng(9, kHeldOutStream, 0);
    const DepoInstance d = task.draw(rng, suite);
    EXPECT_EQ(int(d.successor.size()), 20);
    for (auto [q, k] : d.queries) EXPECT_EQ(k, suite == 0 ? 8 : suite == 1 ? 4 : 1);
  }
}

// K = 2 and 3: k = K/2 is already 1, so there is no third suite (their runs keep their two metrics).
TEST(TaskDepo, KOneSuiteOnlyWhenKHalfExceedsOne) {
  for (int k_max : {1, 2, 3}) {
    DepoTask task(depo_config(8, k_max, 48, 1, 1, 0));
    EXPECT_EQ(task.eval_suites().size(), 2u) << "K = " << k_max;
    EXPECT_EQ(task.metric_names().size(), 2u) << "K = " << k_max;
  }
  DepoTask k4(depo_config(8, 4, 48, 1, 1, 0));
  EXPECT_EQ(k4.metric_names().back(), "depo_acc_k1");
}

TEST(TaskDepo, CycleSizesFollowTheInverseSqrtLaw) {
  // p(n) ~ 1 / (n + sqrt(N)) on 3..N: with N = 100, p(3) / p(100) = 110 / 13.
  std::map<int, int> counts;
  CounterRng rng(4, 4);
  const int draws = 200000;
  for (int i = 0; i < draws; i++) counts[sample_size_inverse_sqrt(rng, 3, 100)]++;
  double total = 0;
  for (int n = 3; n <= 100; n++) total += 1.0 / (n + 10.0);
  for (int n : {3, 50, 100}) {
    const double expected = draws / (n + 10.0) / total;
    EXPECT_NEAR(counts[n], expected, 5 * std::sqrt(expected)) << "n = " << n;
  }
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_EQ(counts.count(101), 0u);
}

TEST(TaskDepo, ConfigErrorsNameTheKey) {
  try {
    DepoTask task(depo_config(225, 8, 50, 1, 2, 100));
    FAIL() << "a window too small for n = N was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task.context: 100"), std::string::npos) << e.what();
  }
  try {
    DepoTask task(depo_config(60, 8, 50, 1, 1, 0));  // only 50 one-token names
    FAIL() << "too few distinct names was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task.depo.n_max: 60"), std::string::npos) << e.what();
  }
}

TEST(Packing, FirstInstanceIsWholeLaterOnesAreCutAndNotScored) {
  DepoTask task(depo_config(12, 2, 48, 1, 1, 80));
  Batch b;
  b.resize(40, 80);
  int cut_rows = 0;
  for (int r = 0; r < b.B; r++) {
    task.sample(b, r, 7, 11, uint64_t(r));
    // The row replays instances from the same stream: the first must appear whole at the start.
    CounterRng rng = row_rng(7, 11, uint64_t(r));
    const Instance first = task.make_instance(rng, PackedTask::kTrainingInstance);
    ASSERT_LE(first.size(), 80);
    for (int i = 0; i < first.size(); i++) ASSERT_EQ(b.tokens[size_t(r) * 80 + size_t(i)], first.tokens[size_t(i)]);
    // Scores never fall inside an instance cut at the window end: the last scored target is followed by a whole
    // instance's end (a <bos> or the window end exactly where an instance ends).
    int offset = first.size();
    for (;;) {
      const Instance next = task.make_instance(rng, PackedTask::kTrainingInstance);
      if (offset + next.size() > 80) {
        cut_rows += offset < 80;
        for (int t = offset - 1; t < 79; t++) EXPECT_EQ(b.score_mask[size_t(r) * 80 + size_t(t)], 0.f);
        break;
      }
      offset += next.size();
    }
  }
  EXPECT_GT(cut_rows, 10) << "the test should see cut instances";
}

TEST(Packing, TooLongFirstInstanceIsAnError) {
  Batch b;
  b.resize(1, 4);
  CounterRng rng(1, 1);
  EXPECT_THROW(pack_row(b, 0, rng,
                        [](CounterRng&) {
                          Instance i;
                          for (int t = 0; t < 5; t++) i.push(t, true);
                          return i;
                        }),
               Error);
}

TEST(Packing, RowsAreAPureFunctionOfSeedStreamIndex) {
  DepoTask task(depo_config(12, 2, 48, 1, 1, 128));
  Batch a = task.make_batch(6, 5, 9), b;
  b.resize(6, 128);
  for (int r = 5; r >= 0; r--) task.sample(b, r, 5, 9, uint64_t(r));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.loss_mask, b.loss_mask);
  EXPECT_EQ(a.score_mask, b.score_mask);
  Batch c = task.make_batch(6, 6, 9);
  EXPECT_NE(a.tokens, c.tokens);
}

namespace {

// An evaluator written from the format alone: prefix notation over values [0, m) and operator tokens.
int eval_prefix(const std::vector<int>& toks, size_t& pos, int m, const std::vector<char>& ops) {
  const int t = toks[pos++];
  if (t < m) return t;
  const char op = ops[size_t(t - m) % ops.size()];
  const long a = eval_prefix(toks, pos, m, ops), b = eval_prefix(toks, pos, m, ops);
  long v = op == '+' ? a + b : op == '-' ? a - b : a * b;
  return int(((v % m) + m) % m);
}

}  // namespace

TEST(TaskMano, AnswersEqualADirectEvaluation) {
  for (bool augment : {false, true}) {
    TaskConfig c;
    c.name = "mano";
    c.mano.max_ops = 10;
    c.mano.knowledge_augment = augment;
    ManoTask task(c);
    const std::vector<char> ops = {'+', '-', '*'};
    std::map<int, int> lengths;
    std::set<int> op_tokens;
    for (uint64_t i = 0; i < 500; i++) {
      CounterRng rng = row_rng(2, 0, i);
      const Instance inst = task.make_instance(rng, PackedTask::kTrainingInstance);
      ASSERT_EQ(inst.tokens[0], task.bos());
      const int ops_count = inst.tokens[1] - task.len_token(1) + 1;
      ASSERT_GE(ops_count, 1);
      ASSERT_LE(ops_count, 10);
      lengths[ops_count]++;
      std::vector<int> expr(inst.tokens.begin() + 2, inst.tokens.end() - 2);
      EXPECT_EQ(int(expr.size()), 2 * ops_count + 1);
      for (int t : expr)
        if (t >= 23) op_tokens.insert(t);
      size_t pos = 0;
      const int value = eval_prefix(expr, pos, 23, ops);
      EXPECT_EQ(pos, expr.size());
      EXPECT_EQ(inst.tokens[inst.tokens.size() - 2], task.ans());
      EXPECT_EQ(inst.tokens.back(), value);
      EXPECT_EQ(task.evaluate_prefix(expr), value);
      EXPECT_EQ(inst.scored.back(), 1);
      EXPECT_EQ(std::count(inst.scored.begin(), inst.scored.end(), 1), 1);
      EXPECT_EQ(std::count(inst.loss.begin(), inst.loss.end(), 1), inst.size()) << "Mano trains on every token";
    }
    EXPECT_EQ(lengths.size(), 10u);
    for (auto [len, count] : lengths) EXPECT_NEAR(count, 50, 25) << "l = " << len;
    EXPECT_EQ(op_tokens.size(), augment ? 6u : 3u);
  }
}

TEST(TaskMano, EvaluationUsesLOperatorsAndScoresOneTokenPerInstance) {
  TaskConfig c;
  c.name = "mano";
  c.mano.max_ops = 4;
  c.context = 64;
  ManoTask task(c);
  Batch b = task.make_eval_batch(8, 3, kHeldOutStream, 0);
  for (int r = 0; r < 8; r++) {
    EXPECT_EQ(b.tokens[size_t(r) * 64 + 1], task.len_token(4));
    int scored = 0;
    for (int t = 0; t < 64; t++) scored += b.score_mask[size_t(r) * 64 + size_t(t)] != 0.f;
    EXPECT_EQ(scored, 4) << "four whole 13-token instances fit in 64 tokens; the fifth is cut and not scored";
  }
  MetricSums sums;
  std::vector<float> logits(size_t(8) * 64 * size_t(task.vocab_size()), 0.f);
  for (size_t i = 0; i < b.targets.size(); i++) logits[i * size_t(task.vocab_size()) + size_t(b.targets[i])] = 1.f;
  task.score(b, logits.data(), 0, sums);
  EXPECT_DOUBLE_EQ(sums["mano_acc"].sum / sums["mano_acc"].count, 1.0);
  EXPECT_EQ(sums["mano_acc"].count, 32);
}
