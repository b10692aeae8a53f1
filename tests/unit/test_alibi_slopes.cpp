// model.attention.alibi_slopes: geometric is the paper's rule 2^(-8h/H), press the reference code's get_slopes
// (Press et al., ofirpress/attention_with_linear_biases; BLOOM, MPT). Both are checked against definitions written
// here independently of nn/attention.h, and a model built with either attends with exactly those slopes, also
// after its config has gone through a checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "nn/attention.h"
#include "tiny_model.h"
#include "train/checkpoint.h"

namespace canonlab {
namespace {

// Press et al.'s get_slopes, transcribed from the reference code's recursive definition:
//   get_slopes_power_of_2(n): start = 2^(-2^-(log2(n) - 3)), ratio = start, [start * ratio^i for i in range(n)]
//   get_slopes(n): power_of_2(n) if log2(n) is whole, else with c = 2^floor(log2(n)):
//                  power_of_2(c) + get_slopes(2c)[0::2][:n - c]
std::vector<double> press_get_slopes(int n) {
  auto power_of_2 = [](int m) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(double(m)) - 3)));
    std::vector<double> s;
    for (int i = 0; i < m; i++) s.push_back(start * std::pow(start, i));
    return s;
  };
  const double lg = std::log2(double(n));
  if (lg == std::floor(lg)) return power_of_2(n);
  const int c = 1 << int(std::floor(lg));
  std::vector<double> s = power_of_2(c);
  const std::vector<double> twice = press_get_slopes(2 * c);
  for (size_t i = 0; int(s.size()) < n; i += 2) s.push_back(twice[i]);
  return s;
}

void expect_slopes(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t h = 0; h < want.size(); h++) EXPECT_NEAR(got[h], want[h], 1e-14 * want[h]) << what << ", head " << h;
}

std::vector<double> powers_of_two(const std::vector<double>& exponents) {
  std::vector<double> s;
  for (double e : exponents) s.push_back(std::pow(2.0, e));
  return s;
}

TEST(AlibiSlopes, PressIsTheReferenceCodesGetSlopes) {
  for (int H : {1, 2, 3, 5, 6, 7, 8, 11, 12, 16, 20, 24, 33, 64, 96})
    expect_slopes(alibi_slopes(H, "press"), press_get_slopes(H), "H = " + std::to_string(H));
}

TEST(AlibiSlopes, PressValuesForSixElevenAndTwelveHeads) {
  // By hand: the 4- or 8-head set, then every other slope of the 8- or 16-head set.
  expect_slopes(alibi_slopes(6, "press"), powers_of_two({-2, -4, -6, -8, -1, -3}), "H = 6");
  expect_slopes(alibi_slopes(11, "press"), powers_of_two({-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5}), "H = 11");
  expect_slopes(alibi_slopes(12, "press"), powers_of_two({-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5}),
                "H = 12");
}

TEST(AlibiSlopes, GeometricIsThePapersRuleAndTheDefault) {
  for (int H : {1, 6, 8, 11, 12}) {
    std::vector<double> want;
    for (int h = 1; h <= H; h++) want.push_back(std::pow(2.0, -8.0 * h / H));
    expect_slopes(alibi_slopes(H, "geometric"), want, "H = " + std::to_string(H));
    EXPECT_EQ(alibi_slopes(H), alibi_slopes(H, "geometric"));
  }
  expect_slopes(alibi_slopes(8), powers_of_two({-1, -2, -3, -4, -5, -6, -7, -8}), "H = 8");
  EXPECT_EQ(RunConfig{}.model.attention.alibi_slopes, "geometric");
}

TEST(AlibiSlopes, TheRulesAgreeExactlyWhenHeadsArePowersOfTwo) {
  for (int H : {1, 2, 4, 8, 16, 32}) EXPECT_EQ(alibi_slopes(H, "press"), alibi_slopes(H, "geometric")) << H;
  for (int H : {3, 6, 11, 12}) EXPECT_NE(alibi_slopes(H, "press"), alibi_slopes(H, "geometric")) << H;
}

TEST(AlibiSlopes, UnknownRuleIsRefused) {
  try {
    alibi_slopes(6, "bloom");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.attention.alibi_slopes: 'bloom'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("allowed: geometric, press"), std::string::npos) << e.what();
  }
}

// The slope each head of layer 0 attends with: with the query projections zeroed every content score is 0, so a
// query's probabilities are p[t, s] ∝ exp(−m (t − s)) and m = log(p[t, t] / p[t, t − 1]).
std::vector<double> slopes_the_model_uses(const RunConfig& cfg) {
  test::TinyModel<double> m(cfg);
  ParameterStore<double>& ps = m.model->params();
  int zeroed = 0;
  for (const ParamInfo& p : ps.infos())
    if (p.name.ends_with(".q_proj.weight")) {
      std::fill_n(ps.values().begin() + long(p.offset), p.numel, 0.0);
      zeroed++;
    }
  EXPECT_EQ(zeroed, cfg.model.n_layers);
  std::vector<double> slopes;
  m.arena.reset();
  StepContext<double> ctx{m.arena, m.model->backend()};
  ctx.on_attention_probs = [&](int layer, const double* probs, int, int H, int Tn) {
    if (layer != 0) return;
    const int t = Tn - 1;
    for (int h = 0; h < H; h++) {  // batch row 0
      const double* row = probs + (size_t(h) * Tn + t) * Tn;
      slopes.push_back(std::log(row[t] / row[t - 1]));
    }
  };
  const int* tokens = ctx.upload(std::span<const int>(m.batch.tokens));
  m.model->forward(ctx, tokens, m.batch.B, m.batch.T);
  return slopes;
}

RunConfig six_head_alibi(const std::string& rule) {
  return test::tiny_copy_config({"model.d_model=24", "model.n_heads=6", "model.attention.position=alibi",
                                 "model.attention.alibi_slopes=" + rule});
}

TEST(AlibiSlopes, AModelAttendsWithTheConfiguredSlopes) {
  for (const std::string rule : {"press", "geometric"}) {
    const std::vector<double> used = slopes_the_model_uses(six_head_alibi(rule));
    ASSERT_EQ(used.size(), 6u) << rule;
    const std::vector<double> want = rule == "press" ? press_get_slopes(6) : alibi_slopes(6, "geometric");
    for (size_t h = 0; h < 6; h++) EXPECT_NEAR(used[h], want[h], 1e-9) << rule << ", head " << h;
  }
}

TEST(AlibiSlopes, TheRuleSurvivesACheckpoint) {
  const RunConfig cfg = six_head_alibi("press");
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("canonlab_alibi_" + std::to_string(::getpid()) + ".safetensors");
  const auto model = build_model<float>(cfg.model, cfg.train.seed);
  save_model(path.string(), cfg, model->params(), 0);
  const RunConfig back = read_model_config(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(back.model.attention.alibi_slopes, "press");
  const std::vector<double> used = slopes_the_model_uses(back);
  ASSERT_EQ(used.size(), 6u);
  for (size_t h = 0; h < 6; h++) EXPECT_NEAR(used[h], press_get_slopes(6)[h], 1e-9) << "head " << h;
}

TEST(AlibiSlopes, ConfigRefusesPressWithoutAlibi) {
  for (const std::string position : {"rope", "nope", "learned"}) {
    try {
      test::tiny_copy_config({"model.attention.position=" + position, "model.attention.alibi_slopes=press"});
      FAIL() << position << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("model.attention.alibi_slopes: 'press'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + position + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("allowed: geometric"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(test::tiny_copy_config({"model.attention.position=rope"}).model.attention.alibi_slopes, "geometric");
  try {
    test::tiny_copy_config({"model.attention.position=alibi", "model.attention.alibi_slopes=bloom"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allowed: geometric, press"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace canonlab
