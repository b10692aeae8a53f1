// MQAR in the Zoology format: layout, targets, masks, the power-law gap distribution, filler, determinism, metric.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "data/mqar.h"
#include "data/packing.h"

namespace canonlab {
namespace {

TaskConfig mqar_config(int vocab, int pairs, int context, double power_a = 0.01, bool random_non_queries = true) {
  TaskConfig cfg;
  cfg.name = "mqar";
  cfg.context = context;
  cfg.mqar.vocab = vocab;
  cfg.mqar.pairs = pairs;
  cfg.mqar.power_a = power_a;
  cfg.mqar.random_non_queries = random_non_queries;
  return cfg;
}

std::string error_of(const TaskConfig& cfg) {
  try {
    MqarTask task(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TaskMqar, LayoutKeysValuesAndQueries) {
  for (auto [V, K, T] : {std::tuple{8192, 8, 64}, std::tuple{100, 16, 64}, std::tuple{300, 16, 256}, std::tuple{70, 3, 13}}) {
    MqarTask task(mqar_config(V, K, T));
    ASSERT_EQ(task.vocab_size(), V);
    ASSERT_EQ(task.seq_len(), T);
    for (uint64_t i = 0; i < 300; i++) {
      CounterRng rng = row_rng(7, 3, i);
      const MqarInstance m = task.draw(rng);
      ASSERT_EQ(int(m.keys.size()), K);
      ASSERT_EQ(int(m.tokens.size()), T);
      std::set<int> keys(m.keys.begin(), m.keys.end()), values(m.values.begin(), m.values.end());
      ASSERT_EQ(int(keys.size()), K) << "keys are distinct";
      ASSERT_EQ(int(values.size()), K) << "values are distinct";
      for (int j = 0; j < K; j++) {
        ASSERT_GE(m.keys[size_t(j)], 1);
        ASSERT_LT(m.keys[size_t(j)], V / 2);
        ASSERT_GE(m.values[size_t(j)], V / 2);
        ASSERT_LT(m.values[size_t(j)], V);
        ASSERT_EQ(m.tokens[size_t(2 * j)], m.keys[size_t(j)]);
        ASSERT_EQ(m.tokens[size_t(2 * j + 1)], m.values[size_t(j)]);
      }
      // Each key is queried exactly once after the pairs, at an even offset, and the target there is its value.
      int queries = 0;
      for (int t = 0; t < T; t++) {
        if (!m.is_query[size_t(t)]) continue;
        queries++;
        ASSERT_GE(t, 2 * K);
        ASSERT_EQ((t - 2 * K) % 2, 0);
        ASSERT_LE(t, T - 2);
        const int j = int(std::find(m.keys.begin(), m.keys.end(), m.tokens[size_t(t)]) - m.keys.begin());
        ASSERT_LT(j, K) << "query token is a key";
        ASSERT_EQ(t, 2 * K + 2 * m.gaps[size_t(j)]);
        ASSERT_EQ(m.targets[size_t(t)], m.values[size_t(j)]);
      }
      ASSERT_EQ(queries, K);
    }
  }
}

TEST(TaskMqar, MasksAtQueryPositionsOnly) {
  for (const char* loss_on : {"default", "answers", "all"}) {
    TaskConfig cfg = mqar_config(512, 8, 64);
    cfg.loss_on = loss_on;
    MqarTask task(cfg);
    const bool all = std::string(loss_on) == "all";
    const Batch b = task.make_batch(16, 11, 5);
    for (int r = 0; r < b.B; r++) {
      CounterRng rng = row_rng(11, 5, uint64_t(r));
      const MqarInstance m = task.draw(rng);  // the row is the instance drawn from its own row stream
      for (int t = 0; t < b.T; t++) {
        const size_t i = size_t(r) * size_t(b.T) + size_t(t);
        ASSERT_EQ(b.tokens[i], m.tokens[size_t(t)]);
        ASSERT_EQ(b.score_mask[i], m.is_query[size_t(t)] ? 1.f : 0.f);
        if (m.is_query[size_t(t)]) {
          ASSERT_EQ(b.loss_mask[i], 1.f);
          ASSERT_GE(b.targets[i], 256);  // a value
        } else {
          ASSERT_EQ(b.loss_mask[i], all && t + 1 < b.T ? 1.f : 0.f) << loss_on << " t=" << t;
          if (t + 1 < b.T) {
            ASSERT_EQ(b.targets[i], b.tokens[i + 1]);  // "all" trains the next input token
          }
        }
      }
    }
  }
}

// First draw: p(gap = g) = w_g / sum w, w_g = (g + 1)^(a - 1). Second draw (K = 2): sum_f p_f p_g / (1 - p_f).
void check_gap_law(double a) {
  const int T = 64, K = 2, space = (T - 2 * K) / 2, draws = 20000;
  MqarTask task(mqar_config(8192, K, T, a));
  ASSERT_EQ(task.gap_space(), space);
  std::vector<double> p(static_cast<size_t>(space));
  double total = 0;
  for (int g = 0; g < space; g++) total += p[size_t(g)] = std::pow(g + 1.0, a - 1.0);
  for (double& x : p) x /= total;
  std::vector<double> second(static_cast<size_t>(space), 0.0);
  for (int g = 0; g < space; g++)
    for (int f = 0; f < space; f++)
      if (f != g) second[size_t(g)] += p[size_t(f)] * p[size_t(g)] / (1 - p[size_t(f)]);
  std::vector<int> first_count(static_cast<size_t>(space), 0), second_count(static_cast<size_t>(space), 0);
  for (int i = 0; i < draws; i++) {
    CounterRng rng = row_rng(1, 2, uint64_t(i));
    const MqarInstance m = task.draw(rng);
    ASSERT_NE(m.gaps[0], m.gaps[1]);
    first_count[size_t(m.gaps[0])]++;
    second_count[size_t(m.gaps[1])]++;
  }
  for (int g = 0; g < space; g++) {
    for (auto [count, prob] : {std::pair{first_count[size_t(g)], p[size_t(g)]}, std::pair{second_count[size_t(g)], second[size_t(g)]}}) {
      const double expect = prob * draws, sigma = std::sqrt(draws * prob * (1 - prob));
      EXPECT_NEAR(count, expect, 5 * sigma + 2) << "a=" << a << " gap " << g;
    }
  }
}

TEST(TaskMqar, GapsFollowThePowerLaw) {
  check_gap_law(0.01);  // ~1/i: gap 0 about 29x more likely than the last gap
  check_gap_law(1.0);   // uniform
  // The headline property in plain numbers (K = 8, T = 64, a = 0.01): short gaps dominate.
  MqarTask task(mqar_config(8192, 8, 64));
  int shortest = 0, longest = 0;
  for (int i = 0; i < 3000; i++) {
    CounterRng rng = row_rng(3, 0, uint64_t(i));
    for (int g : task.draw(rng).gaps) shortest += g == 0, longest += g == task.gap_space() - 1;
  }
  EXPECT_GT(shortest, 5 * longest);
  EXPECT_GT(shortest, 3000 * 0.9);  // gap 0 is picked in almost every instance
}

TEST(TaskMqar, RandomNonQueriesOnAndOff) {
  const int V = 1000, K = 4, T = 64;
  MqarTask zeros(mqar_config(V, K, T, 0.01, false)), random(mqar_config(V, K, T, 0.01, true));
  int filler = 0, nonzero = 0, high = 0;
  for (uint64_t i = 0; i < 200; i++) {
    CounterRng r1 = row_rng(5, 1, i), r2 = row_rng(5, 1, i);
    const MqarInstance a = zeros.draw(r1), b = random.draw(r2);
    // Same keys, values and gaps (fillers are drawn last), so the two differ only at filler slots.
    ASSERT_EQ(a.keys, b.keys);
    ASSERT_EQ(a.gaps, b.gaps);
    for (int t = 2 * K; t < T; t++) {
      if (a.is_query[size_t(t)]) {
        ASSERT_EQ(a.tokens[size_t(t)], b.tokens[size_t(t)]);
        continue;
      }
      ASSERT_EQ(a.tokens[size_t(t)], 0) << "Zoology's filler is 0";
      ASSERT_GE(b.tokens[size_t(t)], 0);
      ASSERT_LT(b.tokens[size_t(t)], V);
      filler++;
      nonzero += b.tokens[size_t(t)] != 0;
      high += b.tokens[size_t(t)] >= V / 2;
    }
  }
  EXPECT_GT(nonzero, filler * 0.99);
  EXPECT_NEAR(double(high) / filler, 0.5, 0.05) << "filler is uniform over the whole vocabulary";
}

TEST(TaskMqar, Deterministic) {
  MqarTask task(mqar_config(8192, 8, 64));
  const Batch a = task.make_batch(8, 42, 17), b = task.make_batch(8, 42, 17), c = task.make_batch(8, 42, 18);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.loss_mask, b.loss_mask);
  EXPECT_NE(a.tokens, c.tokens);
  // A row depends only on (seed, stream, index), not on which batch row it lands in.
  Batch d;
  d.resize(3, 64);
  task.sample(d, 2, 42, 17, 5);
  EXPECT_TRUE(std::equal(d.tokens.begin() + 128, d.tokens.end(), a.tokens.begin() + 5 * 64));
  EXPECT_TRUE(std::equal(d.targets.begin() + 128, d.targets.end(), a.targets.begin() + 5 * 64));
}

TEST(TaskMqar, PerfectLogitsScoreOneWrongScoreZero) {
  const int V = 80;
  MqarTask task(mqar_config(V, 4, 64));
  const Batch b = task.make_eval_batch(6, 9, kHeldOutStream, 0);
  std::vector<float> right(b.tokens.size() * V, 0.f), wrong(b.tokens.size() * V, 0.f);
  for (size_t i = 0; i < b.tokens.size(); i++) {
    right[i * V + size_t(b.targets[i])] = 5.f;
    wrong[i * V + size_t((b.targets[i] + 1) % V)] = 5.f;
  }
  MetricSums good, bad;
  task.score(b, right.data(), 0, good);
  task.score(b, wrong.data(), 0, bad);
  EXPECT_EQ(good["mqar_acc"].count, 6 * 4);
  EXPECT_DOUBLE_EQ(good["mqar_acc"].sum, 6 * 4);
  EXPECT_EQ(bad["mqar_acc"].count, 6 * 4);
  EXPECT_DOUBLE_EQ(bad["mqar_acc"].sum, 0);
  EXPECT_EQ(task.metric_names(), std::vector<std::string>{"mqar_acc"});
}

TEST(TaskMqar, ConfigErrorsNameTheKey) {
  EXPECT_EQ(MqarTask(mqar_config(8192, 8, 0)).seq_len(), 64);
  EXPECT_NE(error_of(mqar_config(8192, 17, 64)).find("task.mqar.pairs"), std::string::npos);
  EXPECT_EQ(error_of(mqar_config(8192, 16, 64)), "");
  EXPECT_NE(error_of(mqar_config(64, 4, 64)).find("task.mqar.vocab"), std::string::npos);
  EXPECT_EQ(error_of(mqar_config(65, 4, 64)), "");
  EXPECT_NE(error_of(mqar_config(8192, 4, -1)).find("task.context"), std::string::npos);
  EXPECT_NE(error_of(mqar_config(8192, 4, 64, 0.0)).find("task.mqar.power_a"), std::string::npos);
}

TEST(TaskMqar, TokenText) {
  MqarTask task(mqar_config(100, 4, 64));
  EXPECT_EQ(task.token_text(0), "_");
  EXPECT_EQ(task.token_text(7), "k7");
  EXPECT_EQ(task.token_text(50), "v0");
  EXPECT_EQ(task.token_text(99), "v49");
}

}  // namespace
}  // namespace canonlab
