// Finite-difference checks (double precision) of every module's backward, through whole tiny models: each
// case switches on one option or a combination, and every parameter's analytic gradient is compared with
// central differences of the masked cross-entropy loss.
#include <gtest/gtest.h>

#include <functional>

#include "config/config.h"
#include "tiny_model.h"

using namespace canonlab;

namespace {

struct Case {
  std::string name;
  std::vector<std::string> sets;
};

RunConfig tiny_config(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.d_model=8",   "model.n_heads=2",     "model.n_layers=2",
                                  "task.vocab=7",      "task.n_symbols=3",    "train.batch_size=2",
                                  "model.init_std=0.5", "model.attention.position=nope"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config_from_yaml_string("{}", all);
}

using DoubleModel = test::TinyModel<double>;
using test::check_params;

}  // namespace

class ModelGradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradcheck, EveryParameterMatchesFiniteDifferences) {
  DoubleModel m(tiny_config(GetParam().sets));
  std::string failures = check_params(m, [](const std::string&) { return true; });
  EXPECT_TRUE(failures.empty()) << failures;
}

INSTANTIATE_TEST_SUITE_P(
    Options, ModelGradcheck,
    ::testing::Values(
        Case{"nope", {}},
        Case{"rope", {"model.attention.position=rope"}},
        Case{"partial_rope", {"model.attention.position=rope", "model.attention.rope_dim=2"}},
        Case{"alibi", {"model.attention.position=alibi"}},
        Case{"learned_positions", {"model.attention.position=learned"}},
        Case{"key_shift_offset1", {"model.attention.key_shift.layers=[0]", "model.attention.key_shift.offset=1"}},
        Case{"key_shift_offset2_late", {"model.attention.key_shift.layers=[1]", "model.attention.key_shift.offset=2"}},
        // the token-shift family (docs/token-shift.md): every mode's learned coefficients and inputs
        Case{"key_shift_replace", {"model.attention.key_shift.layers=[0]", "model.attention.key_shift.mode=replace"}},
        Case{"key_shift_smeared_offset2_rope",
             {"model.attention.position=rope", "model.attention.key_shift.layers=[0,1]",
              "model.attention.key_shift.mode=smeared", "model.attention.key_shift.offset=2"}},
        Case{"key_shift_kv_canon_B", {"model.attention.key_shift.layers=[1]", "model.attention.key_shift.mode=kv",
                                      "model.canon.set=B"}},
        Case{"key_shift_partial_rope",
             {"model.attention.position=rope", "model.attention.rope_dim=2", "model.attention.key_shift.layers=[0]",
              "model.attention.key_shift.mode=partial"}},
        // grouped-query attention: 4 query heads of 2 dims over 2 (and 1) key/value heads, with every stage that
        // acts on k and v (Canon-B over the narrower [q | k | v], RoPE, the projections' shifts, ALiBi, biases);
        // ±1 scores are piecewise constant (no finite differences): torch_ref checks their straight-through gradient
        Case{"gqa_rope_canon_B", {"model.n_heads=4", "model.n_kv_heads=2", "model.attention.position=rope",
                                  "model.canon.set=AB"}},
        Case{"gqa_mqa_kv_shift_alibi", {"model.n_heads=4", "model.n_kv_heads=1", "model.attention.position=alibi",
                                        "model.attention.key_shift.layers=[0]", "model.attention.key_shift.mode=kv"}},
        Case{"gqa_smeared_bias", {"model.n_heads=4", "model.n_kv_heads=2", "model.attention.position=rope",
                                  "model.attention.key_shift.layers=[1]", "model.attention.key_shift.mode=smeared",
                                  "model.attention.qkv_bias=true"}},
        Case{"canon_ABCD", {"model.canon.set=ABCD"}},
        Case{"cross_layer", {"model.canon.cross_layer.layers=[0]"}},
        Case{"cross_layer_nores_silu_layernorm_k2",
             {"model.n_layers=3", "model.canon.cross_layer.layers=[0,1]", "model.canon.cross_layer.residual=false",
              "model.canon.cross_layer.activation=silu", "model.canon.cross_layer.norm=layernorm",
              "model.canon.cross_layer.kernel_size=2"}},
        Case{"cross_layer_with_canon_BD_elu_rmsnorm",
             {"model.canon.set=BD", "model.canon.cross_layer.layers=[0]", "model.canon.cross_layer.activation=elu",
              "model.canon.cross_layer.norm=rmsnorm"}},
        Case{"canon_ABCD_nores", {"model.canon.set=ABCD", "model.canon.residual=false"}},
        Case{"canon_kernel2_groups2_silu_layernorm",
             {"model.canon.set=ABCD", "model.canon.kernel_size=2", "model.canon.groups=2",
              "model.canon.activation=silu", "model.canon.norm=layernorm"}},
        Case{"canon_kernel1_groups1_linear", {"model.canon.set=AC", "model.canon.kernel_size=1", "model.canon.groups=1"}},
        Case{"canon_elu_rmsnorm", {"model.canon.set=BD", "model.canon.activation=elu", "model.canon.norm=rmsnorm"}},
        Case{"swiglu_canon_D", {"model.mlp.kind=swiglu", "model.canon.set=D"}},
        // With biases gate and up are not one contiguous weight block: the unfused path.
        Case{"swiglu_bias_canon_D", {"model.mlp.kind=swiglu", "model.mlp.bias=true", "model.canon.set=D"}},
        Case{"relu2_bias", {"model.mlp.kind=relu2", "model.mlp.bias=true"}},
        Case{"layernorm_qkv_bias", {"model.norm=layernorm", "model.attention.qkv_bias=true"}},
        Case{"tied_embeddings", {"model.tie_embeddings=true", "model.attention.position=rope"}},
        Case{"everything",
             {"model.attention.position=rope", "model.attention.rope_dim=2", "model.canon.set=ABCD",
              "model.mlp.kind=swiglu", "model.attention.key_shift.layers=[0,1]", "model.tie_embeddings=true"}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// sign() has zero derivative almost everywhere, so finite differences cannot see the straight-through
// gradient. Parameters downstream of the last sign() (values, outputs, MLP, head) still have true gradients;
// the straight-through part itself is checked op by op (test_ops_*) and end to end against PyTorch.
TEST(ModelGradcheckSignSte, ParametersAfterTheSignMatchFiniteDifferences) {
  for (const char* grad : {"identity", "clipped"}) {
    DoubleModel m(tiny_config({"model.attention.scoring=sign_ste", std::string("model.attention.ste_grad=") + grad,
                               "model.attention.position=alibi", "model.attention.key_shift.layers=[0]"}));
    std::string failures = check_params(m, [](const std::string& n) {
      return n.find("layers.1.attn.v_proj") == 0 || n.find("layers.1.attn.o_proj") == 0 ||
             n.find("layers.1.mlp") == 0 || n.find("final_norm") == 0 || n.find("lm_head") == 0;
    });
    EXPECT_TRUE(failures.empty()) << grad << ":\n" << failures;
  }
}

// The straight-through gradient reaches the query and key projections (it would be exactly zero without it).
TEST(ModelGradcheckSignSte, StraightThroughGradientReachesQueriesAndKeys) {
  DoubleModel m(tiny_config({"model.attention.scoring=sign_ste"}));
  m.loss(true);
  ParameterStore<double>& ps = m.model->params();
  for (const ParamInfo& p : ps.infos()) {
    if (p.name.find("q_proj.weight") == std::string::npos && p.name.find("k_proj.weight") == std::string::npos) continue;
    double norm = 0;
    for (size_t i = 0; i < p.numel; i++) norm += std::abs(ps.grads()[p.offset + i]);
    EXPECT_GT(norm, 0.0) << p.name;
  }
}
