// The linear-time families as whole models: finite differences in double for every mixer and option (with the
// chunked kernels at a chunk that does not divide T, and with the naive ones), chunked == naive logits and
// gradients in float, and token-by-token decoding == the parallel forward for each mixer.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "config/config.h"
#include "engine/backend/cpu_backend.h"
#include "models/mixers.h"
#include "tiny_model.h"

using namespace canonlab;

namespace {

struct Case {
  std::string name;
  std::vector<std::string> sets;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// T = 2 * 3 + 1 = 7 tokens, chunk 3: two full chunks and a partial one.
RunConfig tiny_linear_config(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.d_model=8",          "model.n_heads=2",
                                  "model.n_layers=2",         "task.vocab=7",
                                  "task.n_symbols=3",         "train.batch_size=2",
                                  "model.init_std=0.5",       "model.attention.position=nope",
                                  "model.mlp.kind=swiglu",    "model.recurrent.chunk_size=3",
                                  "model.mamba2.d_state=4",   "model.gla.gate_low_rank_dim=3",
                                  "model.gla.expand_k=1",     "model.delta.expand_k=1",
                                  "model.delta.expand_v=1",   "model.attention.window=3"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config_from_yaml_string("{}", all);
}

using test::TinyModel;

std::string check_all_params(TinyModel<double>& m) {
  return test::check_params(m, [](const std::string&) { return true; }, 16);
}

std::vector<Case> gradcheck_cases() {
  return {
      Case{"mamba2_noconv", {"model.family=mamba2"}},
      Case{"mamba2_b", {"model.family=mamba2", "model.canon.set=b"}},
      Case{"mamba2_b_naive", {"model.family=mamba2", "model.canon.set=b", "model.recurrent.kernel=naive"}},
      Case{"mamba2_AbB", {"model.family=mamba2", "model.canon.set=AbB"}},
      Case{"mamba2mlp_AbCD", {"model.family=mamba2", "model.mamba2.mlp=true", "model.canon.set=AbCD"}},
      Case{"mamba2_groups2_mimetic", {"model.family=mamba2", "model.canon.set=b", "model.mamba2.ngroups=2", "model.mamba2.init=mimetic"}},
      Case{"gla", {"model.family=gla"}},
      Case{"gla_b_elu", {"model.family=gla", "model.canon.set=b", "model.gla.feature_map=elu_plus_one"}},
      Case{"gla_AbCD_relu", {"model.family=gla", "model.canon.set=AbCD", "model.gla.feature_map=relu"}},
      Case{"gla_AbBCD_silu_nogate_clamp",
           {"model.family=gla", "model.canon.set=AbBCD", "model.gla.feature_map=silu", "model.gla.output_gate=false",
            "model.gla.clamp_min=-0.05"}},
      Case{"gla_naive", {"model.family=gla", "model.canon.set=b", "model.recurrent.kernel=naive"}},
      Case{"gdn_noconv", {"model.family=gdn"}},
      Case{"gla_cross_layer", {"model.family=gla", "model.canon.set=b", "model.canon.cross_layer.layers=[0]",
                               "model.canon.cross_layer.norm=layernorm"}},
      // Mamba2 without MLP: a block with one residual add, so residual=false takes away the whole identity path
      Case{"mamba2_cross_layer_nores", {"model.family=mamba2", "model.canon.set=b", "model.canon.cross_layer.layers=[0]",
                                        "model.canon.cross_layer.residual=false", "model.canon.cross_layer.activation=silu"}},
      Case{"hybrid_MGDN_cross_layer", {"model.family=hybrid", "model.n_layers=4", "model.layer_pattern=MGDN",
                                       "model.canon.set=b", "model.canon.cross_layer.layers=[0, 2]",
                                       "model.canon.cross_layer.kernel_size=2", "model.canon.cross_layer.norm=rmsnorm"}},
      Case{"gdn_b", {"model.family=gdn", "model.canon.set=b"}},
      Case{"gdn_AbBCD_nores_negeig", {"model.family=gdn", "model.canon.set=AbBCD", "model.canon.residual=false", "model.delta.allow_neg_eigval=true"}},
      Case{"gdn_AbBCD_canon_options",
           {"model.family=gdn", "model.canon.set=AbBCD", "model.canon.kernel_size=3", "model.canon.activation=elu",
            "model.canon.norm=layernorm", "model.canon.groups=2"}},
      Case{"mamba2_AbB_canon_options",
           {"model.family=mamba2", "model.canon.set=AbB", "model.canon.kernel_size=2", "model.canon.activation=silu",
            "model.canon.norm=rmsnorm", "model.recurrent.conv_kernel=3"}},
      Case{"gdn_naive", {"model.family=gdn", "model.canon.set=b", "model.recurrent.kernel=naive"}},
      Case{"deltanet_b_nogate", {"model.family=deltanet", "model.canon.set=b", "model.delta.output_gate=false"}},
      Case{"deltanet_AbCD", {"model.family=deltanet", "model.canon.set=AbCD"}},
      Case{"hybrid_MGDN", {"model.family=hybrid", "model.n_layers=4", "model.layer_pattern=MGDN", "model.canon.set=AbCD"}},
      Case{"hybrid_DS_window", {"model.family=hybrid", "model.layer_pattern=DS", "model.canon.set=b"}},
  };
}

}  // namespace

class LinearModelGradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(LinearModelGradcheck, EveryParameterMatchesFiniteDifferences) {
  TinyModel<double> m(tiny_linear_config(GetParam().sets));
  std::string failures = check_all_params(m);
  EXPECT_TRUE(failures.empty()) << failures;
}

INSTANTIATE_TEST_SUITE_P(Options, LinearModelGradcheck, ::testing::ValuesIn(gradcheck_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The chunked kernels and the naive recurrences give the same model in float, for chunk sizes that do and do not
// divide T (T = 13 here).
TEST(LinearModelKernels, ChunkedMatchesNaiveInFloat) {
  for (const char* family : {"mamba2", "gla", "gdn", "deltanet"})
    for (int chunk : {1, 4, 5, 64}) {
      std::vector<std::string> sets = {std::string("model.family=") + family, "model.canon.set=AbCD",
                                       "task.n_symbols=6", "model.recurrent.chunk_size=" + std::to_string(chunk),
                                       "model.init_std=0.2", "model.mamba2.mlp=true"};
      TinyModel<float> fast(tiny_linear_config(sets));
      sets.push_back("model.recurrent.kernel=naive");
      TinyModel<float> slow(tiny_linear_config(sets));
      std::vector<float> lf, ls;
      const double loss_fast = fast.loss(true, &lf), loss_slow = slow.loss(true, &ls);
      EXPECT_NEAR(loss_fast, loss_slow, 1e-5 * std::abs(loss_slow)) << family << " chunk " << chunk;
      float worst = 0;
      for (size_t i = 0; i < lf.size(); i++) worst = std::max(worst, std::abs(lf[i] - ls[i]));
      EXPECT_LT(worst, 1e-4f) << family << " chunk " << chunk << " logits";
      auto gf = fast.model->params().grads(), gs = slow.model->params().grads();
      float gmax = 0, gdiff = 0;
      for (size_t i = 0; i < gs.size(); i++) gmax = std::max(gmax, std::abs(gs[i])), gdiff = std::max(gdiff, std::abs(gf[i] - gs[i]));
      EXPECT_LT(gdiff, 1e-4f * gmax + 1e-6f) << family << " chunk " << chunk << " gradients";
    }
}

// Token-by-token decoding of each mixer (with its convs, Canon-B, positions and key shift) reproduces the
// parallel forward.
TEST(MixerDecode, StepByStepMatchesParallelForward) {
  struct DecodeCase {
    char letter;
    std::vector<std::string> sets;
  };
  const std::vector<DecodeCase> cases = {
      {'M', {"model.family=mamba2", "model.canon.set=b"}},
      {'M', {"model.family=mamba2", "model.canon.set="}},
      {'M', {"model.family=mamba2", "model.canon.set=bB", "model.mamba2.ngroups=2"}},
      {'G', {"model.family=gla", "model.canon.set=b", "model.gla.feature_map=elu_plus_one"}},
      {'G', {"model.family=gla", "model.canon.set=B", "model.gla.clamp_min=-0.1"}},
      {'D', {"model.family=gdn", "model.canon.set=b"}},
      {'D', {"model.family=gdn", "model.canon.set=bB", "model.delta.allow_neg_eigval=true"}},
      {'D', {"model.family=gdn", "model.canon.set="}},
      {'N', {"model.family=deltanet", "model.canon.set=b", "model.delta.output_gate=false"}},
      {'A', {"model.attention.position=rope", "model.canon.set=B"}},
      {'A', {"model.attention.position=rope", "model.attention.rope_dim=2", "model.attention.key_shift.layers=[0]",
             "model.attention.key_shift.offset=2"}},
      {'A', {"model.attention.position=alibi", "model.attention.scoring=sign_ste"}},
      {'S', {"model.family=hybrid", "model.layer_pattern=SA", "model.attention.position=rope", "model.canon.set=B"}},
      {'S', {"model.family=hybrid", "model.layer_pattern=SA", "model.attention.position=alibi", "model.attention.window=1"}},
  };
  for (const DecodeCase& dc : cases) {
    std::string label(1, dc.letter);
    for (const auto& s : dc.sets) label += " " + s;
    std::vector<std::string> sets = dc.sets;
    sets.insert(sets.end(), {"model.init_std=0.3", "model.canon.activation=silu", "model.canon.norm=rmsnorm"});
    RunConfig cfg = tiny_linear_config(sets);
    ParameterStore<double> store;
    auto mixer = make_mixer<double>(store, "m", 0, dc.letter, cfg.model);
    store.finalize(5);
    mixer->after_init(store.values());
    const int B = 2, Tn = 9, C = cfg.model.d_model;
    std::vector<double> x = test::random_vector<double>(size_t(B) * Tn * C, 11);
    std::vector<double> y(x.size()), y_step(x.size());
    Arena arena;
    CpuBackend<double> backend;
    StepContext<double> ctx{arena, backend};
    mixer->forward(ctx, y.data(), x.data(), B, Tn);
    auto state = mixer->start_decode(B);
    std::vector<double> xt(size_t(B) * C), yt(size_t(B) * C);
    for (int t = 0; t < Tn; t++) {
      for (int b = 0; b < B; b++)
        std::copy(x.begin() + (size_t(b) * Tn + t) * C, x.begin() + (size_t(b) * Tn + t + 1) * C, xt.begin() + size_t(b) * C);
      mixer->decode_step(*state, yt.data(), xt.data(), B);
      for (int b = 0; b < B; b++)
        std::copy(yt.begin() + size_t(b) * C, yt.begin() + size_t(b + 1) * C, y_step.begin() + (size_t(b) * Tn + t) * C);
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.size(); i++) worst = std::max(worst, std::abs(y[i] - y_step[i])), scale = std::max(scale, std::abs(y[i]));
    EXPECT_LT(worst, 1e-12 * std::max(1.0, scale)) << label;
    EXPECT_GT(scale, 1e-3) << label << ": the mixer output is trivially zero";
  }
}
