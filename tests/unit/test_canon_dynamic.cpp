// Dynamic Canon (model.canon.dynamic, docs/canon-variants.md): the dynamic_conv op fast against naive and against
// finite differences; whole tiny models with a nonzero map against finite differences at every placement
// (Transformer ABCD, GLA AbCD); the zero map (U = 0 at init) is the static model bit for bit with the same seed
// (values, logits, loss, gradients) in a Transformer and a linear family; ordinary parameters keep their init
// stream when extras are registered; bad configs are refused naming the keys.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <ostream>
#include <vector>

#include "config/config.h"
#include "engine/ops/dynamic_conv/fast.h"
#include "engine/ops/dynamic_conv/lowrank.h"
#include "engine/ops/dynamic_conv/naive.h"
#include "engine/backend/cpu_backend.h"
#include "eval/flops.h"
#include "gradcheck.h"
#include "tiny_model.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct DynCase {
  int B, Tn, C, K;
};
std::ostream& operator<<(std::ostream& os, const DynCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K;
}

class OpsDynamicConvFastVsNaive : public ::testing::TestWithParam<DynCase> {};

// out and din are accumulated, so both start from random values; ddelta is written, so it starts as garbage.
TEST_P(OpsDynamicConvFastVsNaive, MatchesInFloat) {
  const auto p = GetParam();
  const size_t n = (size_t)p.B * p.Tn * p.C, nd = n * p.K;
  const auto in = random_vector<float>(n, 1), delta = random_vector<float>(nd, 2), dout = random_vector<float>(n, 3);
  auto out1 = random_vector<float>(n, 4), out2 = out1;
  auto din1 = random_vector<float>(n, 5), din2 = din1;
  std::vector<float> dd1(nd, 9.f), dd2(nd, -9.f);
  dynamic_conv_forward(out1.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  dynamic_conv_forward_naive(out2.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  const double atol = 1e-6 * std::max(1.0, p.K / 4.0);
  auto c = compare(out1.data(), out2.data(), n, 1e-5, atol);
  EXPECT_TRUE(c.ok) << "out " << c.message;
  dynamic_conv_backward(din1.data(), dd1.data(), dout.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  dynamic_conv_backward_naive(din2.data(), dd2.data(), dout.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
  c = compare(din1.data(), din2.data(), n, 1e-5, atol);
  EXPECT_TRUE(c.ok) << "din " << c.message;
  c = compare(dd1.data(), dd2.data(), nd, 1e-6, 1e-7);  // one product each
  EXPECT_TRUE(c.ok) << "ddelta " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsDynamicConvFastVsNaive,
                         ::testing::Values(DynCase{2, 37, 16, 4}, DynCase{3, 70, 80, 4},  // 80: a partial channel tile
                                           DynCase{2, 3, 7, 4},                          // T < K, odd C
                                           DynCase{3, 1, 5, 3}, DynCase{2, 9, 13, 1}, DynCase{2, 130, 24, 5},
                                           DynCase{1, 20, 8, 9}, DynCase{2, 5, 131, 2}));

TEST(OpsDynamicConv, HandComputed) {
  // B = 1, C = 1, K = 2: out[t] += d[t, 0] in[t−1] + d[t, 1] in[t]
  const float in[3] = {1, 2, 3}, delta[6] = {5, 1, 2, -1, 0.5f, 4};
  float out[3] = {10, 20, 30};
  dynamic_conv_forward(out, in, delta, 1, 3, 1, 2);
  EXPECT_FLOAT_EQ(out[0], 10 + 1 * 1.f);            // tap 0 reads t = −1: zero
  EXPECT_FLOAT_EQ(out[1], 20 + 2 * 1.f - 1 * 2.f);
  EXPECT_FLOAT_EQ(out[2], 30 + 0.5f * 2 + 4 * 3.f);
  // din[s] += d[s, 1] dout[s] + d[s+1, 0] dout[s+1]; ddelta[t, i] = dout[t] in[t − 1 + i]
  const float dout[3] = {1, -2, 3};
  float din[3] = {0, 0, 0}, dd[6];
  dynamic_conv_backward(din, dd, dout, in, delta, 1, 3, 1, 2);
  EXPECT_FLOAT_EQ(din[0], 1 * 1.f + 2 * -2.f);
  EXPECT_FLOAT_EQ(din[1], -1 * -2.f + 0.5f * 3);
  EXPECT_FLOAT_EQ(din[2], 4 * 3.f);
  const float want[6] = {0, 1, -2 * 1.f, -2 * 2.f, 3 * 2.f, 3 * 3.f};
  for (int i = 0; i < 6; i++) EXPECT_FLOAT_EQ(dd[i], want[i]) << i;
}

// A zero delta leaves the static output exactly as it was (the zero-map guarantee at the op level).
TEST(OpsDynamicConv, ZeroDeltaAddsExactlyNothing) {
  const int B = 2, Tn = 11, C = 70, K = 4;
  const size_t n = size_t(B) * Tn * C;
  const auto in = random_vector<float>(n, 1), before = random_vector<float>(n, 2);
  const std::vector<float> delta(n * K, 0.f);
  auto out = before, din = before;
  std::vector<float> dd(n * K);
  dynamic_conv_forward(out.data(), in.data(), delta.data(), B, Tn, C, K);
  EXPECT_EQ(std::memcmp(out.data(), before.data(), n * sizeof(float)), 0);
  dynamic_conv_backward(din.data(), dd.data(), in.data(), in.data(), delta.data(), B, Tn, C, K);
  EXPECT_EQ(std::memcmp(din.data(), before.data(), n * sizeof(float)), 0);
}

// Finite differences in double of the fast op: loss = Σ r ⊙ out, with respect to in and delta.
TEST(OpsDynamicConv, BackwardMatchesFiniteDifferences) {
  for (const DynCase p : {DynCase{2, 6, 3, 4}, DynCase{1, 2, 5, 3}}) {
    const size_t n = (size_t)p.B * p.Tn * p.C, nd = n * p.K;
    auto in = random_vector<double>(n, 1), delta = random_vector<double>(nd, 2);
    const auto r = random_vector<double>(n, 3);
    auto loss = [&] {
      std::vector<double> out(n, 0.0);
      dynamic_conv_forward(out.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
      return test::dot(out, r);
    };
    std::vector<double> din(n, 0.0), dd(nd);
    dynamic_conv_backward(din.data(), dd.data(), r.data(), in.data(), delta.data(), p.B, p.Tn, p.C, p.K);
    auto g = test::gradcheck(loss, in.data(), n, din.data());
    EXPECT_TRUE(g.ok) << p << " din " << g.message;
    g = test::gradcheck(loss, delta.data(), nd, dd.data());
    EXPECT_TRUE(g.ok) << p << " ddelta " << g.message;
  }
}

// ---- the low-rank form (lowrank.h): offsets Δ_t = U z_t formed on the fly ----

struct LowRankCase {
  int B, Tn, C, K, R;
};
std::ostream& operator<<(std::ostream& os, const LowRankCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K << " R=" << c.R;
}

class OpsDynamicConvLowRank : public ::testing::TestWithParam<LowRankCase> {};

// Fast against the naive composition (Δ formed in double, then the plain ops), every output: out and din
// accumulated onto random values, dz written over garbage, dU accumulated onto random values.
TEST_P(OpsDynamicConvLowRank, MatchesTheNaiveComposition) {
  const auto p = GetParam();
  const size_t n = (size_t)p.B * p.Tn * p.C, nz = (size_t)p.B * p.Tn * p.R, nu = (size_t)p.C * p.K * p.R;
  const auto in = random_vector<float>(n, 1), z = random_vector<float>(nz, 2), up = random_vector<float>(nu, 3);
  const auto dout = random_vector<float>(n, 4);
  auto out1 = random_vector<float>(n, 5), out2 = out1;
  auto din1 = random_vector<float>(n, 6), din2 = din1;
  auto du1 = random_vector<float>(nu, 7), du2 = du1;
  std::vector<float> dz1(nz, 9.f), dz2(nz, -9.f);
  dynamic_conv_lowrank_forward(out1.data(), in.data(), z.data(), up.data(), p.B, p.Tn, p.C, p.K, p.R);
  dynamic_conv_lowrank_forward_naive(out2.data(), in.data(), z.data(), up.data(), p.B, p.Tn, p.C, p.K, p.R);
  const double atol = 2e-6 * std::max(1.0, p.K * p.R / 4.0);
  auto c = compare(out1.data(), out2.data(), n, 1e-5, atol);
  EXPECT_TRUE(c.ok) << "out " << c.message;
  dynamic_conv_lowrank_backward(din1.data(), dz1.data(), du1.data(), dout.data(), in.data(), z.data(), up.data(), p.B,
                                p.Tn, p.C, p.K, p.R);
  dynamic_conv_lowrank_backward_naive(din2.data(), dz2.data(), du2.data(), dout.data(), in.data(), z.data(), up.data(),
                                      p.B, p.Tn, p.C, p.K, p.R);
  c = compare(din1.data(), din2.data(), n, 1e-5, atol);
  EXPECT_TRUE(c.ok) << "din " << c.message;
  c = compare(dz1.data(), dz2.data(), nz, 1e-4, atol * std::sqrt(double(p.C)));
  EXPECT_TRUE(c.ok) << "dz " << c.message;
  c = compare(du1.data(), du2.data(), nu, 1e-4, atol * std::sqrt(double(p.B) * p.Tn));
  EXPECT_TRUE(c.ok) << "dU " << c.message;
}

// Sums run per token (out, din, dz) or per channel over the tokens in order (dU): the thread count changes no bit.
TEST_P(OpsDynamicConvLowRank, SameBitsOnOneAndTwoThreads) {
  const auto p = GetParam();
  const size_t n = (size_t)p.B * p.Tn * p.C, nz = (size_t)p.B * p.Tn * p.R, nu = (size_t)p.C * p.K * p.R;
  const auto in = random_vector<float>(n, 1), z = random_vector<float>(nz, 2), up = random_vector<float>(nu, 3);
  const auto dout = random_vector<float>(n, 4);
  std::vector<std::vector<float>> outs;
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    std::vector<float> out(n, 0.f), din(n, 0.f), dz(nz), du(nu, 0.f);
    dynamic_conv_lowrank_forward(out.data(), in.data(), z.data(), up.data(), p.B, p.Tn, p.C, p.K, p.R);
    dynamic_conv_lowrank_backward(din.data(), dz.data(), du.data(), dout.data(), in.data(), z.data(), up.data(), p.B,
                                  p.Tn, p.C, p.K, p.R);
    for (auto* v : {&out, &din, &dz, &du}) outs.push_back(*v);
  }
  omp_set_num_threads(threads);
  for (size_t i = 0; i < 4; i++)
    EXPECT_EQ(std::memcmp(outs[i].data(), outs[i + 4].data(), outs[i].size() * sizeof(float)), 0) << "output " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsDynamicConvLowRank,
                         ::testing::Values(LowRankCase{2, 37, 16, 4, 4}, LowRankCase{3, 70, 80, 4, 2},  // partial tiles
                                           LowRankCase{2, 3, 7, 4, 3},                                 // T < K
                                           LowRankCase{3, 1, 5, 3, 1}, LowRankCase{2, 9, 13, 1, 5},
                                           LowRankCase{1, 130, 192, 5, 4}, LowRankCase{2, 5, 131, 2, 8}));

// A zero U adds exactly nothing: out and din keep their bits, dz is zero, dU receives the gradient of the map.
TEST(OpsDynamicConvLowRank, ZeroMapAddsExactlyNothing) {
  const int B = 2, Tn = 11, C = 70, K = 4, R = 3;
  const size_t n = size_t(B) * Tn * C, nz = size_t(B) * Tn * R, nu = size_t(C) * K * R;
  const auto in = random_vector<float>(n, 1), before = random_vector<float>(n, 2), z = random_vector<float>(nz, 3);
  const std::vector<float> up(nu, 0.f);
  auto out = before, din = before;
  std::vector<float> dz(nz, 7.f), du(nu, 0.f);
  dynamic_conv_lowrank_forward(out.data(), in.data(), z.data(), up.data(), B, Tn, C, K, R);
  EXPECT_EQ(std::memcmp(out.data(), before.data(), n * sizeof(float)), 0);
  dynamic_conv_lowrank_backward(din.data(), dz.data(), du.data(), in.data(), in.data(), z.data(), up.data(), B, Tn, C,
                                K, R);
  EXPECT_EQ(std::memcmp(din.data(), before.data(), n * sizeof(float)), 0);
  for (float v : dz) EXPECT_EQ(v, 0.f);
  double norm = 0;
  for (float v : du) norm += std::abs(v);
  EXPECT_GT(norm, 0.0);
}

// Finite differences in double of the fast op: loss = Σ r ⊙ out, with respect to in, z and U.
TEST(OpsDynamicConvLowRank, BackwardMatchesFiniteDifferences) {
  for (const LowRankCase p : {LowRankCase{2, 6, 3, 4, 2}, LowRankCase{1, 2, 5, 3, 3}, LowRankCase{1, 7, 70, 2, 1}}) {
    const size_t n = (size_t)p.B * p.Tn * p.C, nz = (size_t)p.B * p.Tn * p.R, nu = (size_t)p.C * p.K * p.R;
    auto in = random_vector<double>(n, 1), z = random_vector<double>(nz, 2), up = random_vector<double>(nu, 3);
    const auto r = random_vector<double>(n, 4);
    auto loss = [&] {
      std::vector<double> out(n, 0.0);
      dynamic_conv_lowrank_forward(out.data(), in.data(), z.data(), up.data(), p.B, p.Tn, p.C, p.K, p.R);
      return test::dot(out, r);
    };
    std::vector<double> din(n, 0.0), dz(nz), du(nu, 0.0);
    dynamic_conv_lowrank_backward(din.data(), dz.data(), du.data(), r.data(), in.data(), z.data(), up.data(), p.B,
                                  p.Tn, p.C, p.K, p.R);
    auto g = test::gradcheck(loss, in.data(), n, din.data());
    EXPECT_TRUE(g.ok) << p << " din " << g.message;
    g = test::gradcheck(loss, z.data(), nz, dz.data());
    EXPECT_TRUE(g.ok) << p << " dz " << g.message;
    g = test::gradcheck(loss, up.data(), nu, du.data());
    EXPECT_TRUE(g.ok) << p << " dU " << g.message;
  }
}

RunConfig tiny_config(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.d_model=8",          "model.n_heads=2",       "model.n_layers=2",
                                  "task.vocab=7",             "task.n_symbols=3",      "train.batch_size=2",
                                  "model.init_std=0.5",       "model.attention.position=nope",
                                  "model.recurrent.chunk_size=3", "model.gla.gate_low_rank_dim=3",
                                  "model.gla.expand_k=1"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config_from_yaml_string("{}", all);
}

struct ModelCase {
  std::string name;
  std::vector<std::string> sets;
  int dynamic_layers;  // Canon layers with a map (2 layers × placements)
};
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

const std::vector<ModelCase>& model_cases() {
  static const std::vector<ModelCase> cases = {
      {"transformer_ABCD", {"model.canon.set=ABCD"}, 8},
      {"transformer_ABCD_silu_rmsnorm_nores",
       {"model.canon.set=ABCD", "model.canon.activation=silu", "model.canon.norm=rmsnorm", "model.canon.residual=false",
        "model.canon.kernel_size=3"},
       8},
      {"gla_AbCD", {"model.family=gla", "model.canon.set=AbCD", "model.mlp.kind=swiglu"}, 6},
  };
  return cases;
}

class DynamicCanonModel : public ::testing::TestWithParam<ModelCase> {};

// Every parameter, the maps' U and V included, with U nonzero so that every term of the backward is live.
TEST_P(DynamicCanonModel, EveryParameterMatchesFiniteDifferences) {
  std::vector<std::string> sets = GetParam().sets;
  sets.push_back("model.canon.dynamic=2");
  test::TinyModel<double> m(tiny_config(sets));
  ASSERT_EQ(test::randomize_dynamic_canon(m.model->params()), GetParam().dynamic_layers);
  const std::string failures = test::check_params(m, [](const std::string&) { return true; });
  EXPECT_TRUE(failures.empty()) << failures;
}

// The map matters once U is nonzero: the logits move (so the gradcheck above does test the dynamic term).
TEST_P(DynamicCanonModel, ANonzeroMapChangesTheLogits) {
  std::vector<std::string> sets = GetParam().sets;
  sets.push_back("model.canon.dynamic=2");
  test::TinyModel<double> m(tiny_config(sets));
  std::vector<double> zero_map, nonzero_map;
  m.loss(false, &zero_map);
  test::randomize_dynamic_canon(m.model->params());
  m.loss(false, &nonzero_map);
  double gap = 0;
  for (size_t i = 0; i < zero_map.size(); i++) gap = std::max(gap, std::abs(zero_map[i] - nonzero_map[i]));
  EXPECT_GT(gap, 1e-3);
}

// At init (U = 0) a dynamic=4 model is the static model of the same seed, bit for bit: the static parameters'
// values, the logits, the loss and every shared parameter's gradient. dU is nonzero (the map starts learning), dV
// is exactly zero (nothing flows through a zero U).
TEST_P(DynamicCanonModel, ZeroMapIsTheStaticModelBitForBit) {
  test::TinyModel<float> fixed(tiny_config(GetParam().sets));
  std::vector<std::string> sets = GetParam().sets;
  sets.push_back("model.canon.dynamic=4");
  test::TinyModel<float> dynamic(tiny_config(sets));
  std::vector<float> logits_static, logits_dynamic;
  const double loss_static = fixed.loss(true, &logits_static);
  const double loss_dynamic = dynamic.loss(true, &logits_dynamic);
  EXPECT_EQ(std::memcmp(&loss_static, &loss_dynamic, sizeof(double)), 0) << loss_static << " vs " << loss_dynamic;
  ASSERT_EQ(logits_static.size(), logits_dynamic.size());
  EXPECT_EQ(std::memcmp(logits_static.data(), logits_dynamic.data(), logits_static.size() * sizeof(float)), 0);

  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : dynamic.model->params().infos()) by_name[p.name] = &p;
  const auto& ps = fixed.model->params();
  const auto& pd = dynamic.model->params();
  for (const ParamInfo& p : ps.infos()) {
    ASSERT_TRUE(by_name.count(p.name)) << p.name;
    const ParamInfo& q = *by_name[p.name];
    ASSERT_EQ(p.numel, q.numel) << p.name;
    EXPECT_EQ(std::memcmp(ps.values().data() + p.offset, pd.values().data() + q.offset, p.numel * sizeof(float)), 0)
        << "value " << p.name;
    EXPECT_EQ(std::memcmp(ps.grads().data() + p.offset, pd.grads().data() + q.offset, p.numel * sizeof(float)), 0)
        << "grad " << p.name;
  }
  int maps = 0;
  for (const ParamInfo& q : pd.infos()) {
    const bool up = q.name.ends_with(".dyn_up.weight"), down = q.name.ends_with(".dyn_down.weight");
    if (!up && !down) continue;
    EXPECT_EQ(q.group, ParamGroup::canon) << q.name;
    double norm = 0;
    for (size_t i = 0; i < q.numel; i++) norm += std::abs(double(pd.grads()[q.offset + i]));
    if (up) {
      EXPECT_GT(norm, 0.0) << q.name;
      maps++;
    } else {
      EXPECT_EQ(norm, 0.0) << q.name;
    }
  }
  EXPECT_EQ(maps, GetParam().dynamic_layers);
  EXPECT_EQ(pd.infos().size(), ps.infos().size() + 2 * size_t(maps));
}

// The low-rank op (the CPU default) and the GEMM path a backend without it takes (Δ materialised) are the same
// function: loss, logits and every gradient agree to float rounding, with a nonzero map; and they are not the same
// code (the arena differs: the GEMM path keeps the offsets and their gradient while it runs).
TEST_P(DynamicCanonModel, LowRankOpMatchesTheMaterialisedOffsets) {
  std::vector<std::string> sets = GetParam().sets;
  sets.push_back("model.canon.dynamic=3");
  const RunConfig cfg = tiny_config(sets);
  std::vector<double> losses;
  std::vector<std::vector<float>> grads, logits(2);
  std::vector<size_t> arena_bytes;
  for (bool lowrank : {true, false}) {
    auto be = std::make_shared<CpuBackend<float>>();
    be->set_lowrank_dynamic_conv(lowrank);
    test::TinyModel<float> m(cfg);
    m.model = build_model<float>(cfg.model, cfg.train.seed, be);
    ASSERT_EQ(test::randomize_dynamic_canon(m.model->params()), GetParam().dynamic_layers);
    losses.push_back(m.loss(true, &logits[lowrank ? 0 : 1]));
    grads.emplace_back(m.model->params().grads().begin(), m.model->params().grads().end());
    arena_bytes.push_back(m.arena.high_water_bytes());
  }
  EXPECT_NE(arena_bytes[0], arena_bytes[1]);
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::abs(losses[1]));
  // tolerances relative to the largest value: float rounding, carried through norms and attention of a model with
  // init_std 0.5 and a map of ±0.5
  float logit_scale = 0;
  for (float v : logits[1]) logit_scale = std::max(logit_scale, std::abs(v));
  auto c = compare(logits[0].data(), logits[1].data(), logits[0].size(), 1e-4, 1e-5 * logit_scale);
  EXPECT_TRUE(c.ok) << "logits " << c.message;
  float scale = 0;
  for (float g : grads[1]) scale = std::max(scale, std::abs(g));
  ASSERT_GT(scale, 0.f);
  c = compare(grads[0].data(), grads[1].data(), grads[0].size(), 1e-3, 1e-5 * scale);
  EXPECT_TRUE(c.ok) << "grads " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Placements, DynamicCanonModel, ::testing::ValuesIn(model_cases()),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.name; });

// The maps' shapes, inits and names: V (R, C) uniform within ±1/√C, U (C·K, R) zero.
TEST(DynamicCanon, ParameterShapesAndInit) {
  const RunConfig cfg = tiny_config({"model.canon.set=ABCD", "model.canon.dynamic=3", "model.canon.kernel_size=2"});
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  const auto& ps = model->params();
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : ps.infos()) by_name[p.name] = &p;
  const ParamInfo* down = by_name.at("layers.0.attn.canon_b.dyn_down.weight");
  const ParamInfo* up = by_name.at("layers.0.attn.canon_b.dyn_up.weight");
  EXPECT_EQ(down->shape, (std::vector<int64_t>{3, 24}));
  EXPECT_EQ(up->shape, (std::vector<int64_t>{48, 3}));
  double most = 0;
  for (size_t i = 0; i < down->numel; i++) most = std::max(most, std::abs(double(ps.values()[down->offset + i])));
  EXPECT_LE(most, 1 / std::sqrt(24.0));
  EXPECT_GT(most, 0.5 / std::sqrt(24.0));
  for (size_t i = 0; i < up->numel; i++) EXPECT_EQ(ps.values()[up->offset + i], 0.f);
  EXPECT_TRUE(by_name.count("layers.1.canon_a.dyn_down.weight") && by_name.count("layers.1.canon_c.dyn_up.weight") &&
              by_name.count("layers.1.mlp.canon_d.dyn_up.weight"));
}

// Extra parameters draw from their own stream range: registering them between ordinary ones changes no ordinary
// parameter's initial values.
TEST(DynamicCanon, ExtraParametersShiftNoOrdinaryInitStream) {
  ParameterStore<double> plain, with_extra;
  for (ParameterStore<double>* s : {&plain, &with_extra}) {
    s->add("a", {5}, InitSpec::normal(1), ParamGroup::linear);
    if (s == &with_extra) s->add("x", {4}, InitSpec::uniform(1), ParamGroup::canon, InitStream::extra);
    s->add("b", {6}, InitSpec::uniform(1), ParamGroup::linear);
  }
  const auto v0 = plain.initial_values(42), v1 = with_extra.initial_values(42);
  EXPECT_TRUE(std::equal(v0.begin(), v0.begin() + 5, v1.begin()));
  EXPECT_TRUE(std::equal(v0.begin() + 5, v0.end(), v1.begin() + 9));
  EXPECT_EQ(plain.infos()[1].init_stream, with_extra.infos()[2].init_stream);
  EXPECT_NE(with_extra.infos()[1].init_stream, plain.infos()[1].init_stream);
}

// The FLOP count adds, per token and Canon layer of C channels, the two maps (R·C·(1 + K) multiply-adds) and the
// dynamic taps (C·K), times 6 (forward + backward, 2 FLOPs each): here d_model 8, swiglu hidden 21 (D: 42
// channels), 2 layers of A (8) + B (24) + C (8) + D (42) = 82 channels each.
TEST(DynamicCanon, FlopCountAddsTheMapsAndTaps) {
  const RunConfig fixed = tiny_config({"model.canon.set=ABCD", "model.mlp.kind=swiglu"});
  const RunConfig dynamic = tiny_config({"model.canon.set=ABCD", "model.mlp.kind=swiglu", "model.canon.dynamic=3"});
  const int B = 2, T = 5, R = 3, K = 4;
  const double channels = 2 * (8 + 24 + 8 + 42);
  EXPECT_DOUBLE_EQ(model_train_flops(dynamic.model, B, T) - model_train_flops(fixed.model, B, T),
                   6.0 * B * T * channels * (R * (1 + K) + K));
}

std::string config_error(const std::vector<std::string>& sets) {
  try {
    config_from_yaml_string("", sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DynamicCanonConfig, BadValuesAreRefusedNamingTheKeys) {
  std::string e = config_error({"model.canon.set=AC", "model.canon.dynamic=4", "model.canon.groups=2"});
  EXPECT_NE(e.find("model.canon.dynamic: 4"), std::string::npos) << e;
  EXPECT_NE(e.find("model.canon.groups: 2"), std::string::npos) << e;
  EXPECT_NE(e.find("depthwise"), std::string::npos) << e;
  e = config_error({"model.canon.set=ABCD", "model.canon.dynamic=-1"});
  EXPECT_NE(e.find("model.canon.dynamic"), std::string::npos) << e;
  EXPECT_NE(e.find("-1"), std::string::npos) << e;
  e = config_error({"model.canon.set=ABCD", "model.canon.dynamic=257"});
  EXPECT_NE(e.find("model.canon.dynamic"), std::string::npos) << e;
  EXPECT_NE(e.find("257"), std::string::npos) << e;
  // groups equal to every channel count in use is depthwise, and so allowed; so is dynamic without Canon layers
  EXPECT_EQ(config_error({"model.d_model=64", "model.canon.set=AC", "model.canon.dynamic=4", "model.canon.groups=64"}),
            "");
  EXPECT_EQ(config_error({"model.canon.set=", "model.canon.dynamic=4", "model.canon.groups=3"}), "");
  EXPECT_EQ(config_from_yaml_string("").model.canon.dynamic, 0);
}

}  // namespace
}  // namespace canonlab
