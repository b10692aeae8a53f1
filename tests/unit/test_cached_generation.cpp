// Cached (linear-time) generation: LanguageModel::decode_step, one position at a time with every layer's caches,
// gives the logits of the full forward pass, so ModelSampler's cached path writes the same tokens as the recompute
// path, for every family and every option that changes the block; Brevo and Lano score the same with both; and
// `canonlab generate` continues prompts of a checkpoint and names bad options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_runner.h"
#include "config/config.h"
#include "data/task.h"
#include "eval/generate.h"
#include "eval/probe.h"
#include "models/language_model.h"
#include "tiny_model.h"
#include "train/trainer.h"

using namespace canonlab;
namespace fs = std::filesystem;

namespace {

using Case = test::SetsCase;
// Copy-task vocabulary (12 symbols + BOS), a context of 40 tokens: room for the longest prompt (9) + 20 new ones.
RunConfig tiny_config(const std::vector<std::string>& sets) { return test::tiny_copy_config(sets); }

std::vector<Case> cases() {
  const std::string rope = "model.attention.position=rope";
  return {
      {"rope", {rope}},
      {"partial_rope", {rope, "model.attention.rope_dim=4"}},
      {"nope", {"model.attention.position=nope"}},
      {"alibi", {"model.attention.position=alibi"}},
      // 6 heads: the reference code's slopes differ from the paper's rule there, and decoding must use the same ones
      {"alibi_press_6heads", {"model.attention.position=alibi", "model.attention.alibi_slopes=press", "model.d_model=24",
                              "model.n_heads=6"}},
      {"learned", {"model.attention.position=learned"}},
      {"sign_ste_key_shift", {"model.attention.position=alibi", "model.attention.scoring=sign_ste",
                              "model.attention.key_shift.layers=[0]"}},
      {"rope_key_shift_offset2_L1", {rope, "model.attention.key_shift.layers=[1]", "model.attention.key_shift.offset=2"}},
      {"key_shift_replace_offset2", {rope, "model.attention.key_shift.layers=[0,1]", "model.attention.key_shift.mode=replace",
                                     "model.attention.key_shift.offset=2"}},
      {"key_shift_smeared_alibi_sign_ste", {"model.attention.position=alibi", "model.attention.scoring=sign_ste",
                                            "model.attention.key_shift.layers=[0]", "model.attention.key_shift.mode=smeared"}},
      {"key_shift_kv_offset3_canon_ABCD", {"model.attention.position=nope", "model.canon.set=ABCD",
                                           "model.attention.key_shift.layers=[0,1]", "model.attention.key_shift.mode=kv",
                                           "model.attention.key_shift.offset=3"}},
      {"key_shift_partial_rope4", {rope, "model.attention.rope_dim=4", "model.attention.key_shift.layers=[1]",
                                   "model.attention.key_shift.mode=partial"}},
      {"canon_ABCD", {"model.attention.position=nope", "model.canon.set=ABCD"}},
      // grouped-query attention: the cache holds the key/value heads, query head j reads head j / group
      {"gqa_rope_canon_B", {rope, "model.n_heads=4", "model.n_kv_heads=2", "model.canon.set=AB"}},
      {"gqa_mqa_alibi_kv_shift_sign_ste", {"model.attention.position=alibi", "model.n_heads=4", "model.n_kv_heads=1",
                                           "model.attention.scoring=sign_ste", "model.attention.key_shift.layers=[0]",
                                           "model.attention.key_shift.mode=kv", "model.attention.key_shift.offset=2"}},
      {"gqa_partial_rope_partial_shift", {rope, "model.attention.rope_dim=2", "model.n_heads=4", "model.n_kv_heads=2",
                                          "model.attention.key_shift.layers=[1]", "model.attention.key_shift.mode=partial"}},
      {"cross_layer", {"model.attention.position=nope", "model.canon.cross_layer.layers=[0]"}},
      {"cross_layer_nores_silu_rmsnorm_BD", {"model.attention.position=nope", "model.canon.set=BD",
                                             "model.canon.cross_layer.layers=[0]", "model.canon.cross_layer.residual=false",
                                             "model.canon.cross_layer.activation=silu",
                                             "model.canon.cross_layer.norm=rmsnorm"}},
      {"canon_ABCD_no_residual", {rope, "model.canon.set=ABCD", "model.canon.residual=false"}},
      {"canon_ABCD_silu_rmsnorm", {rope, "model.canon.set=ABCD", "model.canon.activation=silu", "model.canon.norm=rmsnorm"}},
      // dynamic Canon: the test fills the maps' U (zero at init) so the per-position kernel is live
      {"canon_ABCD_dynamic", {"model.attention.position=nope", "model.canon.set=ABCD", "model.canon.dynamic=3"}},
      {"canon_ABCD_dynamic_silu_layernorm_nores",
       {rope, "model.canon.set=ABCD", "model.canon.dynamic=2", "model.canon.activation=silu",
        "model.canon.norm=layernorm", "model.canon.residual=false"}},
      {"swiglu_canon_D", {rope, "model.mlp.kind=swiglu", "model.canon.set=D"}},
      {"relu2_layernorm_tied", {rope, "model.mlp.kind=relu2", "model.norm=layernorm", "model.tie_embeddings=true"}},
      {"mamba2_b", {"model.family=mamba2", "model.canon.set=b"}},
      {"mamba2_noconv", {"model.family=mamba2", "model.canon.set="}},
      {"mamba2_cross_layer", {"model.family=mamba2", "model.canon.set=b", "model.canon.cross_layer.layers=[0]"}},
      {"mamba2_mlp_AbCD", {"model.family=mamba2", "model.mamba2.mlp=true", "model.canon.set=AbCD"}},
      {"gla_b", {"model.family=gla", "model.canon.set=b"}},
      {"gla_AbCD", {"model.family=gla", "model.canon.set=AbCD"}},
      {"gla_AbCD_dynamic", {"model.family=gla", "model.canon.set=AbCD", "model.canon.dynamic=2"}},
      {"gdn_b", {"model.family=gdn", "model.canon.set=b"}},
      {"gdn_AbCD", {"model.family=gdn", "model.canon.set=AbCD"}},
      {"deltanet_b", {"model.family=deltanet", "model.canon.set=b"}},
      {"deltanet_AbCD", {"model.family=deltanet", "model.canon.set=AbCD"}},
      {"hybrid_MSGA", {"model.family=hybrid", "model.n_layers=4", "model.layer_pattern=MSGA", rope,
                       "model.canon.set=AbCD"}},
      {"hybrid_DNSA_key_shift", {"model.family=hybrid", "model.n_layers=4", "model.layer_pattern=DNSA",
                                 "model.attention.position=alibi", "model.attention.key_shift.layers=[3]"}},
  };
}

// tokens: (B, L). The largest |decode logit - forward logit| over every row and position, relative to
// max(1, the largest |logit|).
template <class T>
double decode_gap(LanguageModel<T>& model, const std::vector<int>& tokens, int B, int L) {
  const int V = model.vocab_size();
  Arena arena;
  StepContext<T> ctx{arena, model.backend()};
  const T* full = model.forward(ctx, ctx.upload(std::span<const int>(tokens)), B, L);
  std::unique_ptr<ModelDecodeState> state = model.start_decode(B);
  std::vector<int> column(static_cast<size_t>(B));
  std::vector<T> step(size_t(B) * V);
  double worst = 0, scale = 1;
  for (int t = 0; t < L; t++) {
    for (int b = 0; b < B; b++) column[size_t(b)] = tokens[size_t(b) * L + t];
    model.decode_step(*state, column.data(), step.data(), B);
    for (int b = 0; b < B; b++)
      for (int v = 0; v < V; v++) {
        const double ref = double(full[(size_t(b) * L + t) * V + v]);
        worst = std::max(worst, std::abs(ref - double(step[size_t(b) * V + v])));
        scale = std::max(scale, std::abs(ref));
      }
  }
  return worst / scale;
}

// Prompts of lengths 1, 4, 6 and 9 in one batch.
std::vector<std::vector<int>> prompts() { return {{12}, {12, 1, 4, 1}, {12, 5, 9, 2, 6, 5}, {12, 3, 5, 8, 9, 7, 9, 3, 2}}; }

// (B, L) right-padded with 0: each row's prompt and continuation.
std::vector<int> padded(const std::vector<std::vector<int>>& rows, int& L) {
  L = 0;
  for (const auto& r : rows) L = std::max(L, int(r.size()));
  std::vector<int> tokens(rows.size() * size_t(L), 0);
  for (size_t b = 0; b < rows.size(); b++) std::copy(rows[b].begin(), rows[b].end(), tokens.begin() + long(b) * L);
  return tokens;
}

class CachedGeneration : public ::testing::TestWithParam<Case> {};

}  // namespace

// Greedy generation (and sampling at temperature 0.8, top-k 4) writes the same 20 tokens per row with both paths;
// the logits agree to 5e-5 in float and 1e-12 in double, relative to max(1, |logit|). The two paths sum in different
// orders (the parallel forward's GEMMs and chunked scans against one-row products and one-step recurrences): measured
// at most 7.5e-6 in float and 1.4e-14 in double over these cases, while a wrong cache, position or shift is off by
// 1e-2 and more.
TEST_P(CachedGeneration, EqualsRecomputeTokenForToken) {
  const RunConfig cfg = tiny_config(GetParam().sets);
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  const int dynamic_maps = test::randomize_dynamic_canon(model->params(), 0.3);
  EXPECT_EQ(dynamic_maps > 0, cfg.model.canon.dynamic > 0);
  ASSERT_EQ(model->recurrent_decode_unavailable(), "");
  Arena arena;
  ModelSampler cached(*model, arena, 4), recompute(*model, arena, 4, GenerationPath::recompute);
  ASSERT_EQ(cached.path(), GenerationPath::cached);
  const auto rows = prompts();
  const auto greedy = cached.continue_prompts(rows, 20, {}, 0.0, 7);
  EXPECT_EQ(greedy, recompute.continue_prompts(rows, 20, {}, 0.0, 7));
  ModelSampler cached_top_k(*model, arena, 4, GenerationPath::cached, 4),
      recompute_top_k(*model, arena, 4, GenerationPath::recompute, 4);
  EXPECT_EQ(cached_top_k.continue_prompts(rows, 20, {}, 0.8, 7), recompute_top_k.continue_prompts(rows, 20, {}, 0.8, 7));

  std::vector<std::vector<int>> full = rows;
  for (size_t b = 0; b < full.size(); b++) {
    ASSERT_EQ(greedy[b].size(), 20u);
    full[b].insert(full[b].end(), greedy[b].begin(), greedy[b].end());
  }
  int L = 0;
  const std::vector<int> tokens = padded(full, L);
  EXPECT_LT(decode_gap(*model, tokens, int(full.size()), L), 5e-5);
  auto model64 = build_model<double>(cfg.model, cfg.train.seed);
  test::randomize_dynamic_canon(model64->params(), 0.3);
  EXPECT_LT(decode_gap(*model64, tokens, int(full.size()), L), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, CachedGeneration, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Stop tokens, the context limit and batches of fewer rows than prompts behave as in the recompute path.
TEST(CachedGenerationLimits, StopTokensContextAndBatchingMatchRecompute) {
  const RunConfig cfg = tiny_config({"model.attention.position=rope", "task.n_symbols=4", "model.max_seq_len=12"});
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  Arena arena;
  const auto rows = prompts();
  for (int batch_rows : {1, 3}) {
    ModelSampler cached(*model, arena, batch_rows), recompute(*model, arena, batch_rows, GenerationPath::recompute);
    const auto a = cached.continue_prompts(rows, 20, {}, 0.0, 1);
    EXPECT_EQ(a, recompute.continue_prompts(rows, 20, {}, 0.0, 1));
    for (size_t b = 0; b < rows.size(); b++) EXPECT_EQ(rows[b].size() + a[b].size(), 12u);  // stopped at the context
    const std::vector<int> stop = {a[0][1], a[3][0]};
    const auto s = cached.continue_prompts(rows, 20, stop, 0.0, 1);
    EXPECT_EQ(s, recompute.continue_prompts(rows, 20, stop, 0.0, 1));
    for (size_t r = 0; r < rows.size(); r++) {  // each row ends at its first stop token, which it keeps
      const auto hit = std::find_first_of(a[r].begin(), a[r].end(), stop.begin(), stop.end());
      EXPECT_EQ(s[r], std::vector<int>(a[r].begin(), hit == a[r].end() ? hit : hit + 1)) << r;
    }
    EXPECT_LE(s[3].size(), 1u);
  }
  ModelSampler cached(*model, arena, 2);
  EXPECT_EQ(cached.continue_prompts({{}, {12, 1}}, 3, {}, 0.0, 1)[0].size(), 0u);  // an empty prompt gets nothing
}

// A decode state refuses a different row count and the position past a learned-position table; a token outside the
// vocabulary is named.
TEST(CachedGenerationLimits, DecodeStepRefusesBadInputs) {
  const RunConfig cfg = tiny_config({"model.attention.position=learned", "task.n_symbols=1", "model.max_seq_len=3"});
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  auto state = model->start_decode(2);
  std::vector<float> logits(size_t(2) * model->vocab_size());
  std::vector<int> tokens = {1, 99};
  try {
    model->decode_step(*state, tokens.data(), logits.data(), 2);
    FAIL() << "token 99 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 99"), std::string::npos) << e.what();
  }
  tokens = {1, 2};
  EXPECT_THROW(model->decode_step(*state, tokens.data(), logits.data(), 1), Error);
  for (int t = 0; t < 3; t++) model->decode_step(*state, tokens.data(), logits.data(), 2);
  EXPECT_THROW(model->decode_step(*state, tokens.data(), logits.data(), 2), Error);
}

namespace {

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("canonlab_cached_gen_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

// Trains cfg for its few steps into a fresh directory and returns it.
std::string train_tiny(const RunConfig& cfg, const std::string& name) {
  const std::string dir = temp_dir(name);
  TrainOptions o;
  o.out_dir = dir;
  o.progress = false;
  o.probe_at_end = false;
  train(cfg, o);
  return dir;
}

RunConfig tiny_trained(const std::string& task, const std::vector<std::string>& extra) {
  std::vector<std::string> sets = {"task.name=" + task, "model.d_model=16", "model.n_layers=2", "model.n_heads=2",
                                   "train.batch_size=4", "train.steps=6", "train.warmup_steps=1", "train.eval_every=0",
                                   "train.eval_batches=1", "train.checkpoint_every=0", "train.threads=1",
                                   "task.eval_samples=6"};
  if (task == "brevo") sets.insert(sets.end(), {"task.context=96", "task.brevo.n_max=6"});
  if (task == "lano") sets.insert(sets.end(), {"task.context=48", "task.lano.grammar=generate", "task.lano.depth=3"});
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config_from_yaml_string("{}", sets);
}

}  // namespace

// Brevo and Lano score a model trained for a few steps identically with both paths (every sum and count).
TEST(CachedGenerationEval, BrevoAndLanoMetricsEqualRecompute) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> models = {
      {"transformer", {"model.family=transformer", "model.canon.set=AC"}},
      {"gla", {"model.family=gla", "model.canon.set=AbCD"}},
  };
  for (const std::string task : {"brevo", "lano"})
    for (const auto& [family, sets] : models) {
      SCOPED_TRACE(task + " on " + family);
      const std::string dir = train_tiny(tiny_trained(task, sets), task + family);
      LoadedCheckpoint c = load_checkpoint(dir);
      Arena arena;
      ModelSampler cached(*c.model, arena, 4), recompute(*c.model, arena, 4, GenerationPath::recompute);
      ASSERT_EQ(cached.path(), GenerationPath::cached);
      MetricSums a, b;
      c.task->score_generation(cached, 11, 6, a);
      c.task->score_generation(recompute, 11, 6, b);
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a.size(), b.size());
      for (const auto& [name, sum] : a) {
        EXPECT_EQ(sum.sum, b[name].sum) << name;
        EXPECT_EQ(sum.count, b[name].count) << name;
        EXPECT_GT(sum.count, 0) << name;
      }
      fs::remove_all(dir);
    }
}

// `canonlab generate`: the cached and recompute paths print the same continuation, a fixed seed gives the same
// sample, and bad options are named with their value (exit status 2).
TEST(CachedGenerationCli, GenerateContinuesAPromptAndNamesBadOptions) {
  using test_support::run_cli;
  const std::string dir = train_tiny(
      config_from_yaml_string("{}", {"model.d_model=16", "model.n_layers=2", "model.n_heads=2", "task.vocab=12",
                                     "task.n_symbols=8", "train.batch_size=2", "train.steps=2", "train.warmup_steps=1",
                                     "train.eval_every=0", "train.eval_batches=1", "train.checkpoint_every=0",
                                     "train.threads=1", "model.canon.set=ABCD", "model.attention.position=rope"}),
      "cli");
  auto generated_line = [](const std::string& out) {
    const size_t at = out.find("\ngenerated ");
    return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  const auto cached = run_cli("generate " + dir + " --prompt 12,3,1,4 --max-new 8");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_NE(cached.output.find("path cached"), std::string::npos) << cached.output;
  const auto recompute = run_cli("generate " + dir + " --prompt '12 3 1 4' --max-new 8 --recompute");
  ASSERT_EQ(recompute.exit_code, 0) << recompute.output;
  EXPECT_NE(recompute.output.find("path recompute"), std::string::npos) << recompute.output;
  EXPECT_EQ(generated_line(cached.output), generated_line(recompute.output));
  const std::string line = generated_line(cached.output);
  EXPECT_EQ(std::count(line.begin(), line.end(), ' '), 8) << cached.output;  // "generated" and 8 ids
  // The model's context is 2 * 8 + 1 = 17 tokens: 4 + 13 at most.
  const auto capped = run_cli("generate " + dir + " --prompt 12,3,1,4 --max-new 100");
  EXPECT_NE(capped.output.find("stopped after 13 tokens"), std::string::npos) << capped.output;

  const std::string sample = "generate " + dir + " --prompt 12,3 --max-new 10 --temperature 1.5 --top-k 5 --seed 9";
  const auto s1 = run_cli(sample), s2 = run_cli(sample), s3 = run_cli(sample + " --recompute");
  ASSERT_EQ(s1.exit_code, 0) << s1.output;
  EXPECT_EQ(generated_line(s1.output), generated_line(s2.output));
  EXPECT_EQ(generated_line(s1.output), generated_line(s3.output));

  struct Bad {
    std::string args, expected;
  };
  const std::vector<Bad> bad = {
      {"--prompt 12,x,3", "--prompt: 'x' is not a token id"},
      {"--prompt 12,99", "--prompt: token id 99 is outside the model's vocabulary [0, 13)"},
      {"--prompt 12,-1", "--prompt: token id -1 is outside"},
      {"--prompt ,", "--prompt: ',' holds no tokens"},
      {"--prompt 1,2,3,4,5,6,7,8,9,10,11,1,2,3,4,5,6", "--prompt: 17 tokens, but the model's context (model.max_seq_len) is 17"},
      {"--prompt 1 --max-new 0", "--max-new: '0' is not allowed"},
      {"--prompt 1 --temperature -1", "--temperature: '-1' is not allowed"},
      {"--prompt 1 --temperature nan", "--temperature: 'nan'"},
      {"--prompt 1 --top-k 14", "--top-k: 14 exceeds the model's vocabulary of 13"},
      {"--prompt 1 --seed x", "--seed: 'x'"},
  };
  for (const Bad& b : bad) {
    const auto r = run_cli("generate " + dir + " " + b.args);
    EXPECT_EQ(r.exit_code, 2) << b.args << "\n" << r.output;
    EXPECT_NE(r.output.find("error: " + b.expected), std::string::npos) << b.args << "\n" << r.output;
  }
  fs::remove_all(dir);
}

// On the text task the prompt is text: the run's tokenizer encodes it and decodes the continuation.
TEST(CachedGenerationCli, TextTaskPromptsAreText) {
  using test_support::run_cli;
  const std::string corpus = temp_dir("corpus.txt");
  {
    std::ofstream f(corpus);
    for (int i = 0; i < 200; i++) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  const std::string dir = train_tiny(
      config_from_yaml_string("{}", {"task.name=text", "task.text.path=" + corpus, "task.context=32",
                                     "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.batch_size=2",
                                     "train.steps=2", "train.warmup_steps=1", "train.eval_every=0",
                                     "train.eval_batches=1", "train.checkpoint_every=0", "train.threads=1"}),
      "text");
  const auto r = run_cli("generate " + dir + " --prompt 'the qu' --max-new 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prompt 116 104 101 32 113 117\n"), std::string::npos) << r.output;  // the bytes of "the qu"
  EXPECT_NE(r.output.find("\ntext "), std::string::npos) << r.output;
  const auto too_long = run_cli("generate " + dir + " --prompt '" + std::string(40, 'a') + "'");
  EXPECT_EQ(too_long.exit_code, 2) << too_long.output;
  EXPECT_NE(too_long.output.find("--prompt: 40 tokens"), std::string::npos) << too_long.output;
  fs::remove_all(dir);
  fs::remove(corpus);
}
