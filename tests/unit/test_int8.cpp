// Weight-only int8 inference (canonlab eval / generate --int8): the per-output-channel quantization and its error
// bound; the fast int8 kernel against the naive one (both paths, strides, bias, threads); a quantized model's forward
// against the fp32 forward of its dequantized weights (Wq * scale) and its decode step against its forward, for every
// family; which parameters are quantized; and the refusals (training, bf16, GPU) with their messages.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "config/config.h"
#include "data/task.h"
#include "engine/ops/int8_linear/fast.h"
#include "engine/ops/int8_linear/naive.h"
#include "engine/ops/int8_linear/quantize.h"
#include "engine/error.h"
#include "eval/int8_inference.h"
#include "eval/probe.h"
#include "gradcheck.h"
#include "models/language_model.h"
#include "tiny_model.h"
#include "train/trainer.h"

using namespace canonlab;
namespace fs = std::filesystem;

namespace {

// (OUT, IN) weights whose rows span five orders of magnitude, one row of zeros and one with a single large entry.
std::vector<float> awkward_weights(int OUT, int IN, uint64_t seed) {
  std::vector<float> w = test::random_vector<float>(size_t(OUT) * IN, seed);
  for (int o = 0; o < OUT; o++)
    for (int i = 0; i < IN; i++) w[size_t(o) * IN + i] *= std::pow(10.0f, float(o % 5) - 3.0f);
  if (OUT > 2)
    for (int i = 0; i < IN; i++) w[size_t(1) * IN + i] = 0.0f;
  if (OUT > 3) w[size_t(2) * IN + IN / 2] = 40.0f;
  return w;
}

}  // namespace

// scale = max|w| / 127; every element comes back within scale / 2 (the rounding), |q| <= 127 and the largest entry of
// each non-zero row maps to ±127; a zero row has scale 0 and dequantizes to zeros.
TEST(Int8Quantize, RoundTripErrorIsAtMostHalfAScalePerElement) {
  const int OUT = 23, IN = 77;
  const std::vector<float> w = awkward_weights(OUT, IN, 5);
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(OUT), back(w.size());
  quantize_int8_rows(q.data(), scale.data(), w.data(), OUT, IN);
  dequantize_int8_rows(back.data(), q.data(), scale.data(), OUT, IN);
  double worst_ratio = 0;
  for (int o = 0; o < OUT; o++) {
    float amax = 0;
    int qmax = 0;
    for (int i = 0; i < IN; i++) amax = std::max(amax, std::fabs(w[size_t(o) * IN + i]));
    EXPECT_EQ(scale[o], amax / 127.0f) << "row " << o;
    for (int i = 0; i < IN; i++) {
      const size_t e = size_t(o) * IN + i;
      ASSERT_GE(q[e], -127);
      ASSERT_LE(q[e], 127);
      qmax = std::max(qmax, std::abs(int(q[e])));
      const double err = std::abs(double(w[e]) - double(back[e]));
      // scale/2 from the rounding, plus the float rounding of w/scale and of q*scale (a few ulps of w)
      ASSERT_LE(err, 0.5 * double(scale[o]) + 4e-7 * std::abs(double(w[e])))
          << "row " << o << " col " << i << " w " << w[e] << " q " << int(q[e]) << " scale " << scale[o];
      if (scale[o] > 0) worst_ratio = std::max(worst_ratio, err / double(scale[o]));
    }
    if (amax > 0) {
      EXPECT_EQ(qmax, 127) << "row " << o;
    }
  }
  for (int i = 0; i < IN; i++) EXPECT_EQ(back[size_t(1) * IN + i], 0.0f);
  EXPECT_EQ(scale[1], 0.0f);
  // The bound is tight: some element is rounded by nearly half a step.
  EXPECT_GT(worst_ratio, 0.45);
  EXPECT_LE(worst_ratio, 0.5 + 1e-5);
}

// Ties round to even, and the largest entry is exactly ±127 (scale 1 here, so w / scale is exact).
TEST(Int8Quantize, TiesRoundToEven) {
  const std::vector<float> w = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -127.0f};
  std::vector<int8_t> q(w.size());
  float scale = 0;
  quantize_int8_rows(q.data(), &scale, w.data(), 1, int(w.size()));
  EXPECT_EQ(scale, 1.0f);
  const std::vector<int8_t> expected = {127, 2, 4, -2, 0, 0, 2, -127};
  EXPECT_EQ(q, expected);
}

namespace {

struct Int8Shape {
  int N, IN, OUT, ldx_pad, ldy_pad;
  bool bias;
};
void PrintTo(const Int8Shape& s, std::ostream* os) {
  *os << "N=" << s.N << " IN=" << s.IN << " OUT=" << s.OUT << " pad=" << s.ldx_pad << "," << s.ldy_pad
      << " bias=" << s.bias;
}
class Int8LinearFastVsNaive : public ::testing::TestWithParam<Int8Shape> {};

}  // namespace

// The fast kernel (dot-product tiles below kInt8GemmRows rows, widen-then-GEMM from there) equals the double
// reference to float rounding, leaves the padding columns of y alone, and gives the same bits on 1 and 2 threads
// and on a second call.
TEST_P(Int8LinearFastVsNaive, MatchesTheReference) {
  const Int8Shape s = GetParam();
  const int ldx = s.IN + s.ldx_pad, ldy = s.OUT + s.ldy_pad;
  const std::vector<float> x = test::random_vector<float>(size_t(s.N) * ldx, 1);
  const std::vector<float> w = awkward_weights(s.OUT, s.IN, 2);
  const std::vector<float> b = test::random_vector<float>(size_t(s.OUT), 3);
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(size_t(s.OUT));
  quantize_int8_rows(q.data(), scale.data(), w.data(), s.OUT, s.IN);
  const float* bp = s.bias ? b.data() : nullptr;
  std::vector<float> y_fast(size_t(s.N) * ldy, 7.f), y_naive = y_fast;
  int8_linear_forward(y_fast.data(), ldy, x.data(), ldx, q.data(), scale.data(), bp, s.N, s.IN, s.OUT);
  int8_linear_forward_naive(y_naive.data(), ldy, x.data(), ldx, q.data(), scale.data(), bp, s.N, s.IN, s.OUT);
  // Relative to the size of the products summed: sum_i |x_i q_i| * scale.
  for (int n = 0; n < s.N; n++)
    for (int o = 0; o < s.OUT; o++) {
      double mag = s.bias ? std::abs(double(b[size_t(o)])) : 0.0;
      for (int i = 0; i < s.IN; i++)
        mag += std::abs(double(x[size_t(n) * ldx + i]) * q[size_t(o) * s.IN + i]) * scale[size_t(o)];
      const size_t e = size_t(n) * ldy + o;
      ASSERT_LE(std::abs(double(y_fast[e]) - double(y_naive[e])), 2e-6 * mag + 1e-30)
          << "n " << n << " o " << o << ": " << y_fast[e] << " vs " << y_naive[e];
    }
  for (int n = 0; n < s.N; n++)
    for (int o = s.OUT; o < ldy; o++) ASSERT_EQ(y_fast[size_t(n) * ldy + o], 7.f);

  const int threads = omp_get_max_threads();
  std::vector<float> again(y_fast.size(), 7.f), one_thread(y_fast.size(), 7.f);
  int8_linear_forward(again.data(), ldy, x.data(), ldx, q.data(), scale.data(), bp, s.N, s.IN, s.OUT);
  omp_set_num_threads(1);
  int8_linear_forward(one_thread.data(), ldy, x.data(), ldx, q.data(), scale.data(), bp, s.N, s.IN, s.OUT);
  omp_set_num_threads(threads);
  EXPECT_EQ(again, y_fast);
  if (s.N < kInt8GemmRows) {
    EXPECT_EQ(one_thread, y_fast);  // the dot tiles do not depend on the thread count
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8LinearFastVsNaive,
    ::testing::Values(Int8Shape{1, 64, 64, 0, 0, false}, Int8Shape{1, 1024, 1024, 0, 0, true},
                      Int8Shape{1, 17, 9, 3, 5, true}, Int8Shape{1, 5, 1, 0, 0, false}, Int8Shape{2, 33, 7, 1, 0, true},
                      Int8Shape{3, 16, 13, 0, 2, false}, Int8Shape{4, 100, 8, 0, 0, true},
                      Int8Shape{5, 48, 200, 4, 4, true}, Int8Shape{15, 64, 65, 0, 0, false},
                      Int8Shape{16, 64, 65, 0, 3, true}, Int8Shape{33, 31, 96, 1, 1, false},
                      Int8Shape{200, 64, 192, 0, 0, true}));

// T = double (the gradient checks' model type) runs the portable loop: the same numbers as the reference.
TEST(Int8LinearDouble, PortablePathMatchesTheReference) {
  const int N = 3, IN = 21, OUT = 6;
  const std::vector<double> x = test::random_vector<double>(size_t(N) * IN, 4);
  const std::vector<float> wf = awkward_weights(OUT, IN, 5);
  std::vector<int8_t> q(wf.size());
  std::vector<float> scale(OUT);
  quantize_int8_rows(q.data(), scale.data(), wf.data(), OUT, IN);
  std::vector<double> y(size_t(N) * OUT), ref(y.size());
  int8_linear_forward(y.data(), OUT, x.data(), IN, q.data(), scale.data(), static_cast<const double*>(nullptr), N, IN,
                      OUT);
  int8_linear_forward_naive(ref.data(), OUT, x.data(), IN, q.data(), scale.data(), static_cast<const double*>(nullptr),
                            N, IN, OUT);
  for (size_t e = 0; e < y.size(); e++) EXPECT_NEAR(y[e], ref[e], 1e-12 * (1 + std::abs(ref[e])));
}

namespace {

using Case = test::SetsCase;
RunConfig tiny_config(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.d_model=32", "train.batch_size=3"};
  all.insert(all.end(), sets.begin(), sets.end());
  return test::tiny_copy_config(all);
}

std::vector<Case> model_cases() {
  const std::string rope = "model.attention.position=rope";
  return {
      {"rope_gelu_fused_qkv", {rope}},
      {"learned_key_shift_unfused_qkv", {"model.attention.position=learned", "model.attention.key_shift.layers=[0]"}},
      {"qkv_mlp_bias", {rope, "model.attention.qkv_bias=true", "model.mlp.bias=true"}},
      {"canon_ABCD_swiglu_fused_gate_up", {"model.attention.position=nope", "model.canon.set=ABCD", "model.mlp.kind=swiglu"}},
      {"relu2_tied_head", {rope, "model.mlp.kind=relu2", "model.tie_embeddings=true"}},
      {"mamba2_mlp_AbCD", {"model.family=mamba2", "model.mamba2.mlp=true", "model.canon.set=AbCD"}},
      {"gla_AbCD", {"model.family=gla", "model.canon.set=AbCD"}},
      {"gdn_b", {"model.family=gdn", "model.canon.set=b"}},
      {"deltanet_AbCD", {"model.family=deltanet", "model.canon.set=AbCD"}},
      {"hybrid_MSGA", {"model.family=hybrid", "model.n_layers=4", "model.layer_pattern=MSGA", rope}},
  };
}

// logits of the batch's forward pass, (B * T * V)
std::vector<float> forward_logits(LanguageModel<float>& model, const Batch& batch) {
  Arena arena;
  StepContext<float> ctx{arena, model.backend()};
  const float* logits = model.forward(ctx, ctx.upload(std::span<const int>(batch.tokens)), batch.B, batch.T);
  return std::vector<float>(logits, logits + size_t(batch.B) * batch.T * model.vocab_size());
}

double max_abs(const std::vector<float>& v) {
  double m = 1;
  for (float x : v) m = std::max(m, std::abs(double(x)));
  return m;
}
double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t e = 0; e < a.size(); e++) m = std::max(m, std::abs(double(a[e]) - double(b[e])));
  return m;
}

class Int8Model : public ::testing::TestWithParam<Case> {};

}  // namespace

// A quantized model computes what the fp32 model with the dequantized weights Wq * scale computes (the same
// products up to float rounding order: measured below 1e-6 relative), decodes token by token what its forward pass
// gives, and quantizes exactly the GEMM weights (every linear-group matrix, plus a tied embedding).
TEST_P(Int8Model, ForwardEqualsTheDequantizedFp32ModelAndDecodeEqualsForward) {
  const RunConfig cfg = tiny_config(GetParam().sets);
  std::unique_ptr<LanguageModel<float>> int8_model = build_model<float>(cfg.model, cfg.train.seed);
  std::unique_ptr<LanguageModel<float>> dequant = build_model<float>(cfg.model, cfg.train.seed);
  const Batch batch = make_task(cfg.task)->make_batch(cfg.train.batch_size, 3, 0);
  const std::vector<float> fp32_logits = forward_logits(*int8_model, batch);

  ParameterStore<float>& ps = int8_model->params();
  ps.quantize_int8();
  ASSERT_TRUE(ps.has_int8());
  // Which tensors: every Linear weight (group linear, 2-D) and the tied embedding; nothing else.
  std::vector<float> values = ps.host_values();
  size_t expected_tensors = 0;
  for (size_t id = 0; id < ps.infos().size(); id++) {
    const ParamInfo& p = ps.infos()[id];
    const bool gemm = (p.group == ParamGroup::linear && p.shape.size() == 2) ||
                      (p.name == "tok_emb.weight" && cfg.model.tie_embeddings);
    EXPECT_EQ(p.gemm_weight, gemm) << p.name;
    if (!p.gemm_weight) continue;
    expected_tensors++;
    const int OUT = int(p.shape[0]), IN = int(p.shape[1]);
    const Int8Block blk = ps.int8().block(ps.infos(), id, OUT, IN);
    ASSERT_TRUE(blk) << p.name;
    dequantize_int8_rows(values.data() + p.offset, blk.q, blk.scale, OUT, IN);
  }
  EXPECT_EQ(ps.int8().quantized_tensors(), expected_tensors);
  EXPECT_GE(expected_tensors, size_t(2 * cfg.model.n_layers));
  // int8 is really in use: the logits move from fp32's by the quantization error, far more than rounding.
  const std::vector<float> int8_of_fp32 = forward_logits(*int8_model, batch);
  EXPECT_GT(max_gap(int8_of_fp32, fp32_logits) / max_abs(fp32_logits), 1e-4);

  // Both models get the dequantized weights Wq * scale (a tied embedding's lookup then reads the same values in
  // both); quantizing them again gives back the same int8 values, so the int8 model computes with the same Wq.
  std::vector<std::vector<int8_t>> q_before;
  for (size_t id = 0; id < ps.infos().size(); id++) {
    const ParamInfo& p = ps.infos()[id];
    if (!p.gemm_weight) continue;
    const Int8Block blk = ps.int8().block(ps.infos(), id, int(p.shape[0]), int(p.shape[1]));
    q_before.emplace_back(blk.q, blk.q + p.numel);
  }
  ps.set_values(values);
  dequant->params().set_values(values);
  size_t k = 0;
  for (size_t id = 0; id < ps.infos().size(); id++) {
    const ParamInfo& p = ps.infos()[id];
    if (!p.gemm_weight) continue;
    const Int8Block blk = ps.int8().block(ps.infos(), id, int(p.shape[0]), int(p.shape[1]));
    EXPECT_TRUE(std::equal(blk.q, blk.q + p.numel, q_before[k++].begin())) << p.name << ": not idempotent";
  }

  const std::vector<float> int8_logits = forward_logits(*int8_model, batch);
  const std::vector<float> dequant_logits = forward_logits(*dequant, batch);
  const double scale = max_abs(dequant_logits);
  EXPECT_LE(max_gap(int8_logits, dequant_logits) / scale, 1e-5);
  // Untied, the first int8 model already had these Wq: the same logits as after the round trip.
  if (!cfg.model.tie_embeddings) {
    EXPECT_LE(max_gap(int8_of_fp32, dequant_logits) / scale, 1e-5);
  }
  std::printf("  [%s] int8 vs dequantized fp32: %.2e, int8 vs fp32: %.2e (relative to the largest logit)\n",
              GetParam().name.c_str(), max_gap(int8_logits, dequant_logits) / scale,
              max_gap(int8_of_fp32, fp32_logits) / max_abs(fp32_logits));

  // The decode step (the one-row GEMV kernel) reproduces the int8 forward pass.
  const int B = batch.B, L = batch.T, V = int8_model->vocab_size();
  std::unique_ptr<ModelDecodeState> state = int8_model->start_decode(B);
  std::vector<int> column(static_cast<size_t>(B));
  std::vector<float> step(size_t(B) * V);
  double worst = 0;
  for (int t = 0; t < L; t++) {
    for (int b = 0; b < B; b++) column[size_t(b)] = batch.tokens[size_t(b) * L + t];
    int8_model->decode_step(*state, column.data(), step.data(), B);
    for (int b = 0; b < B; b++)
      for (int v = 0; v < V; v++)
        worst = std::max(worst, std::abs(double(int8_logits[(size_t(b) * L + t) * V + v]) -
                                         double(step[size_t(b) * V + v])));
  }
  EXPECT_LE(worst / scale, 5e-5);
  std::printf("  [%s] int8 decode step vs int8 forward: %.2e\n", GetParam().name.c_str(), worst / scale);
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, Int8Model, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) { return info.param.name; });

// set_values re-quantizes (a copy never goes stale); a bf16 store and non-finite weights are refused with reasons.
TEST(Int8Store, FollowsSetValuesAndRefusesWhatItCannotQuantize) {
  RunConfig cfg = tiny_config({});
  std::unique_ptr<LanguageModel<float>> model = build_model<float>(cfg.model, cfg.train.seed);
  ParameterStore<float>& ps = model->params();
  ps.quantize_int8();
  size_t id = 0;
  while (!ps.infos()[id].gemm_weight) id++;
  const ParamInfo& p = ps.infos()[id];
  const float before = ps.int8().block(ps.infos(), id, int(p.shape[0]), int(p.shape[1])).scale[0];
  std::vector<float> values = ps.host_values();
  for (size_t e = 0; e < p.numel; e++) values[p.offset + e] *= 2.0f;
  ps.set_values(values);
  EXPECT_EQ(ps.int8().block(ps.infos(), id, int(p.shape[0]), int(p.shape[1])).scale[0], 2.0f * before);

  values[p.offset + 3] = std::nanf("");
  try {
    ps.set_values(values);
    FAIL() << "a NaN weight was quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + p.name + "' holds a non-finite value"), std::string::npos) << e.what();
  }

  cfg.train.precision = "bf16";
  auto bf16 = build_model(cfg);
  EXPECT_THROW(bf16->params().quantize_int8(), Error);
  EXPECT_NE(int8_unavailable(cfg).find("train.precision is bf16"), std::string::npos) << int8_unavailable(cfg);
  try {
    quantize_for_inference(*bf16, cfg);
    FAIL() << "bf16 was quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--int8: train.precision is bf16"), std::string::npos) << e.what();
  }
  cfg.train.precision = "fp32";
  cfg.train.device = "cuda:0";
  EXPECT_NE(int8_unavailable(cfg).find("train.device is cuda:0: int8 inference runs on the CPU only"),
            std::string::npos)
      << int8_unavailable(cfg);
  cfg.train.device = "cpu";
  EXPECT_EQ(int8_unavailable(cfg), "");
}

namespace {

std::string train_tiny(const std::vector<std::string>& extra, const std::string& name) {
  std::vector<std::string> sets = {"model.d_model=32", "model.n_layers=2", "model.n_heads=2", "task.vocab=12",
                                   "task.n_symbols=8", "train.batch_size=4", "train.steps=30", "train.warmup_steps=1",
                                   "train.lr=3e-3", "train.eval_every=0", "train.eval_batches=2",
                                   "train.checkpoint_every=0", "train.threads=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  const RunConfig cfg = config_from_yaml_string("{}", sets);
  const fs::path dir = fs::temp_directory_path() / ("canonlab_int8_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainOptions o;
  o.out_dir = dir.string();
  o.progress = false;
  o.probe_at_end = false;
  train(cfg, o);
  return dir.string();
}

}  // namespace

// canonlab eval --int8 and generate --int8 run and say int8; the metrics stay close to fp32's; training, bf16 and a
// GPU device are refused with exit status 2 and a message naming why.
TEST(Int8Cli, EvalAndGenerateSayInt8AndRefusalsAreClear) {
  using test_support::run_cli;
  const std::string dir = train_tiny({"model.attention.position=rope", "model.canon.set=AC"}, "cli");
  const auto fp32 = run_cli("eval " + dir + " --json");
  const auto int8 = run_cli("eval " + dir + " --json --int8");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  ASSERT_EQ(int8.exit_code, 0) << int8.output;
  const auto a = nlohmann::json::parse(fp32.output), b = nlohmann::json::parse(int8.output);
  EXPECT_EQ(a["weights"], "fp32");
  EXPECT_EQ(b["weights"], "int8");
  EXPECT_GT(b["int8"]["quantized_tensors"].get<int>(), 0);
  const double la = a["eval"]["loss"].get<double>(), lb = b["eval"]["loss"].get<double>();
  EXPECT_NE(la, lb);                          // the int8 weights are in use
  EXPECT_NEAR(lb, la, 0.02 * std::abs(la));   // and close to fp32
  const auto text = run_cli("eval " + dir + " --int8");
  EXPECT_NE(text.output.find("weights int8 (per-output-channel, fp32 activations)"), std::string::npos) << text.output;

  const auto gen = run_cli("generate " + dir + " --prompt 12,3,1,4 --max-new 8 --int8");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_NE(gen.output.find("weights int8"), std::string::npos) << gen.output;
  EXPECT_NE(gen.output.find("path cached"), std::string::npos) << gen.output;
  const auto gen_re = run_cli("generate " + dir + " --prompt 12,3,1,4 --max-new 8 --int8 --recompute");
  auto generated_line = [](const std::string& out) {
    const size_t at = out.find("\ngenerated ");
    return at == std::string::npos ? std::string("(none)") : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  EXPECT_EQ(generated_line(gen.output), generated_line(gen_re.output));

  struct Bad {
    std::string args, expected;
  };
  const std::vector<Bad> bad = {
      {"eval " + dir + " --int8 --set train.precision=bf16",
       "error: --int8: train.precision is bf16: int8 replaces the fp32 GEMMs"},
      {"generate " + dir + " --prompt 1 --int8 --set train.precision=bf16", "error: --int8: train.precision is bf16"},
      {"train " + dir + "/config.resolved.yaml --int8 --out " + dir + "/never",
       "error: --int8: int8 is post-training quantization for canonlab eval and canonlab generate"},
  };
  for (const Bad& x : bad) {
    const auto r = run_cli(x.args);
    EXPECT_EQ(r.exit_code, 2) << x.args << "\n" << r.output;
    EXPECT_NE(r.output.find(x.expected), std::string::npos) << x.args << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/never"));
  fs::remove_all(dir);
}
