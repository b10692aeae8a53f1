// The copy/induction task's format and masks, and the IPMR probe on attention patterns built by hand.
#include <gtest/gtest.h>

#include <set>

#include "config/config.h"
#include "engine/backend/cpu_backend.h"
#include "data/copy_task.h"
#include "eval/ipmr.h"

using namespace canonlab;

namespace {
RunConfig copy_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"task.vocab=20", "task.n_symbols=6", "model.d_model=8", "model.n_heads=2",
                                   "model.n_layers=2", "probe.n_sequences=10", "train.batch_size=4"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config_from_yaml_string("{}", sets);
}
}  // namespace

TEST(CopyTask, SequenceIsBosThenTwoEqualBlocksOfDistinctSymbols) {
  RunConfig cfg = copy_config();
  CopyTask task(cfg.task);
  ASSERT_EQ(task.seq_len(), 13);
  ASSERT_EQ(task.vocab_size(), 21);
  Batch b = task.make_batch(50, 7, 3);
  for (int r = 0; r < b.B; r++) {
    const int* t = b.tokens.data() + r * b.T;
    EXPECT_EQ(t[0], 20);
    std::set<int> distinct(t + 1, t + 7);
    EXPECT_EQ(distinct.size(), 6u);
    for (int i = 0; i < 6; i++) {
      EXPECT_EQ(t[1 + i], t[7 + i]);
      EXPECT_LT(t[1 + i], 20);
    }
    for (int p = 0; p + 1 < b.T; p++) EXPECT_EQ(b.targets[r * b.T + p], t[p + 1]);
    // copy_acc positions: second occurrences of r1..r5 (positions 7..11).
    for (int p = 0; p < b.T; p++) EXPECT_EQ(b.score_mask[r * b.T + p], (p >= 7 && p <= 11) ? 1.f : 0.f) << p;
    EXPECT_EQ(b.loss_mask[r * b.T + b.T - 1], 0.f);
    EXPECT_EQ(b.loss_mask[r * b.T + 0], 1.f);
  }
}

TEST(CopyTask, LossOnCopyMasksOnlyThePredictableTargets) {
  RunConfig cfg = copy_config({"task.loss_on=copy"});
  CopyTask task(cfg.task);
  Batch b = task.make_batch(3, 1, 0);
  EXPECT_EQ(b.loss_mask, b.score_mask);
}

TEST(CopyTask, SamplesDependOnlyOnSeedStreamAndIndex) {
  RunConfig cfg = copy_config();
  CopyTask task(cfg.task);
  Batch a = task.make_batch(8, 5, 11), b;
  b.resize(8, task.seq_len());
  for (int r = 7; r >= 0; r--) task.sample(b, r, 5, 11, uint64_t(r));  // reverse order: same result
  EXPECT_EQ(a.tokens, b.tokens);
  Batch c = task.make_batch(8, 6, 11);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(CopyTask, SymbolsAreDrawnUniformly) {
  RunConfig cfg = copy_config();
  CopyTask task(cfg.task);
  Batch b = task.make_batch(4000, 9, 0);
  std::vector<int> count(20, 0);
  for (int r = 0; r < b.B; r++)
    for (int i = 1; i <= 6; i++) count[b.tokens[r * b.T + i]]++;
  const double expected = 4000.0 * 6 / 20;  // 1200
  for (int c : count) EXPECT_NEAR(c, expected, 5 * std::sqrt(expected));
}

namespace {
// A stand-in model whose attention pattern is written by hand: layer 1 head 0 is a perfect induction head
// (argmax on the token after the earlier occurrence), every other head peaks on BOS with probability
// other_peak (the rest on position 1).
class ScriptedModel final : public LanguageModel<float> {
 public:
  ScriptedModel(const RunConfig& cfg, int n, float other_peak = 1.f) : cfg_(cfg.model), n_(n), other_peak_(other_peak) {
    store_.finalize(0);
  }
  const float* forward(StepContext<float>& ctx, const int* tokens, int B, int T) override {
    const int L = cfg_.n_layers, H = cfg_.n_heads, V = cfg_.vocab_size;
    for (int l = 0; l < L; l++) {
      float* probs = ctx.arena.alloc_zeroed<float>(size_t(B) * H * T * T);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
          for (int q = 0; q < T; q++) {
            float* row = probs + ((size_t(b) * H + h) * T + q) * T;
            const bool induction = l == 1 && h == 0 && q > n_;
            if (induction) {
              row[q - n_ + 1] = 1.f;
            } else {
              row[0] = q > 0 ? other_peak_ : 1.f;
              if (q > 0) row[1] += 1.f - other_peak_;
            }
          }
      ctx.on_attention_probs(l, probs, B, H, T);
    }
    // Logits: predict the copied token everywhere in the second block.
    float* logits = ctx.arena.alloc_zeroed<float>(size_t(B) * T * V);
    for (int b = 0; b < B; b++)
      for (int q = n_ + 1; q < T; q++) logits[(size_t(b) * T + q) * V + tokens[b * T + q - n_ + 1]] = 1.f;
    return logits;
  }
  void backward(StepContext<float>&, const float*, int, int) override {}
  ParameterStore<float>& params() override { return store_; }
  Backend<float>& backend() override { return backend_; }
  const ModelConfig& config() const override { return cfg_; }

 private:
  ModelConfig cfg_;
  int n_;
  float other_peak_;
  ParameterStore<float> store_;
  CpuBackend<float> backend_;
};
}  // namespace

TEST(Ipmr, PerfectInductionHeadScoresOneAndOthersZero) {
  RunConfig cfg = copy_config({"model.attention.key_shift.layers=[0]", "model.attention.key_shift.offset=2"});
  CopyTask task(cfg.task);
  ScriptedModel model(cfg, 6);
  IpmrResult r = measure_ipmr(model, task, cfg);
  ASSERT_EQ(r.deltas, (std::vector<int>{1, 2}));
  EXPECT_EQ(r.n_queries, 10 * 5);
  EXPECT_DOUBLE_EQ(r.per_head[1][1 * 2 + 0], 1.0);
  EXPECT_DOUBLE_EQ(r.per_head[1][0], 0.0);
  EXPECT_DOUBLE_EQ(r.per_head[1][1 * 2 + 1], 0.0);
  EXPECT_DOUBLE_EQ(r.global[1], 1.0);
  EXPECT_DOUBLE_EQ(r.mean[1], 0.25);
  EXPECT_DOUBLE_EQ(r.global[2], 0.0);  // the head lands on p+1, not p+2
  EXPECT_DOUBLE_EQ(r.copy_acc, 1.0);
  // Chance: queries at positions 7..11 attend uniformly over q+1 keys.
  double chance = 0;
  for (int q = 7; q <= 11; q++) chance += 1.0 / (q + 1);
  EXPECT_NEAR(r.chance_head, chance / 5, 1e-12);
  auto top = r.top_heads(1, 1);
  EXPECT_EQ(std::get<0>(top[0]), 1);
  EXPECT_EQ(std::get<1>(top[0]), 0);
  const std::string text = format_ipmr(r, 3);
  EXPECT_NE(text.find("L1H0 100.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("global_ipmr 100.0%"), std::string::npos) << text;
}

// The confident-head rate lets only the most peaked head of each query vote: with every head one-hot the
// earliest head (L0H0, on BOS) wins the tie and the rate is 0; with the others at 0.6 the induction head wins.
TEST(Ipmr, ConfidentHeadIsTheHeadWithTheHighestPeak) {
  RunConfig cfg = copy_config({});
  CopyTask task(cfg.task);
  ScriptedModel tied(cfg, 6, 1.f);
  EXPECT_DOUBLE_EQ(measure_ipmr(tied, task, cfg).confident[1], 0.0);
  ScriptedModel peaked(cfg, 6, 0.6f);
  IpmrResult r = measure_ipmr(peaked, task, cfg);
  EXPECT_DOUBLE_EQ(r.confident[1], 1.0);
  EXPECT_DOUBLE_EQ(r.global[1], 1.0);
  EXPECT_NE(format_ipmr(r, 3).find("confident-head IPMR 100.0%"), std::string::npos);
}
