// Hugging Face export of the linear families (io/hf/hf_linear.h, io/hf/hf_plan.h): which options map to PhysicsLM4's
// GLACanon, GatedDeltaNetCanon and Mamba2Canon, how refusals name our key, and the tensor plan (names, fused MLP
// matrices, the Mamba2 noconv1d placeholder). Numerical checks are in tests/python/test_hf.py.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine/error.h"
#include "io/hf/hf_config.h"
#include "io/hf/hf_plan.h"
#include "models/language_model.h"

namespace canonlab {
namespace {

RunConfig linear_config(const std::string& family, std::vector<std::string> sets) {
  std::vector<std::string> all = {"model.family=" + family, "model.d_model=32", "model.n_heads=4", "model.n_layers=2",
                                  "model.mlp.kind=swiglu", "task.vocab=16", "task.n_symbols=6"};
  if (family == "mamba2") all.push_back("model.mamba2.d_state=8");
  all.insert(all.end(), sets.begin(), sets.end());
  return config_from_yaml_string("{}", all);
}

std::string refusal(const std::string& family, const std::vector<std::string>& sets) {
  try {
    hf_export_format(linear_config(family, sets).model);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfLinear, FamiliesPickTheirFormat) {
  EXPECT_EQ(hf_export_format(linear_config("gla", {"model.canon.set=AbCD"}).model), HfFormat::gla_canon);
  EXPECT_EQ(hf_export_format(linear_config("gdn", {"model.canon.set=AbBCD"}).model), HfFormat::gdn_canon);
  EXPECT_EQ(hf_export_format(linear_config("mamba2", {"model.canon.set=AbB"}).model), HfFormat::mamba2_canon);
  EXPECT_STREQ(hf_format_name(HfFormat::gdn_canon), "GatedDeltaNetCanon");
}

TEST(HfLinear, RefusalsNameKeyAndValue) {
  EXPECT_NE(refusal("gla", {"model.canon.set=AC"}).find("model.canon.set = 'AC'"), std::string::npos);
  EXPECT_NE(refusal("gla", {"model.canon.set=AbB"}).find("Canon-B"), std::string::npos);
  EXPECT_NE(refusal("gla", {"model.canon.set=b", "model.gla.gate_low_rank_dim=8"}).find("model.gla.gate_low_rank_dim = 8"),
            std::string::npos);
  EXPECT_NE(refusal("gla", {"model.canon.set=b", "model.gla.feature_map=elu_plus_one"}).find("model.gla.feature_map = 'elu_plus_one'"),
            std::string::npos);
  EXPECT_NE(refusal("gdn", {"model.delta.allow_neg_eigval=true"}).find("model.delta.allow_neg_eigval = true"), std::string::npos);
  EXPECT_NE(refusal("gdn", {"model.delta.expand_v=1.0"}).find("model.delta.expand_v = 1.0"), std::string::npos);
  EXPECT_NE(refusal("gdn", {"model.mlp.kind=gelu"}).find("model.mlp.kind = 'gelu'"), std::string::npos);
  EXPECT_NE(refusal("mamba2", {"model.mamba2.ngroups=2"}).find("model.mamba2.ngroups = 2"), std::string::npos);
  EXPECT_NE(refusal("mamba2", {"model.tie_embeddings=true"}).find("model.tie_embeddings = true"), std::string::npos);
  EXPECT_NE(refusal("mamba2", {"model.canon.set=A", "model.canon.norm=rmsnorm"}).find("model.canon.norm = 'rmsnorm'"),
            std::string::npos);
  EXPECT_NE(refusal("hybrid", {"model.layer_pattern=AM"}).find("model.family = 'hybrid'"), std::string::npos);
}

// Every parameter lands in exactly one tensor, every tensor's size is the sum of its sources.
void check_plan(const RunConfig& cfg, const std::set<std::string>& expect_some) {
  auto model = build_model<float>(cfg.model, 1);
  const HfFormat f = hf_export_format(cfg.model);
  std::set<std::string> used, names;
  std::map<std::string, int64_t> numel;
  for (const ParamInfo& p : model->params().infos()) numel[p.name] = int64_t(p.numel);
  for (const HfTensorPlan& t : hf_export_plan(f, cfg.model, model->params().infos())) {
    int64_t n = 1, from = 0;
    for (int64_t d : t.shape) n *= d;
    for (const std::string& s : t.sources) {
      EXPECT_TRUE(used.insert(s).second) << s;
      from += numel.at(s);
    }
    if (!t.sources.empty()) {
      EXPECT_EQ(n, from) << t.name;
    }
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
  }
  EXPECT_EQ(used.size(), numel.size());
  for (const std::string& n : expect_some) EXPECT_TRUE(names.count(n)) << n;
}

TEST(HfLinear, PlansCoverEveryParameter) {
  check_plan(linear_config("gla", {"model.canon.set=AbCD"}),
             {"model.layers.0.attn.gk_proj.0.weight", "model.layers.0.attn.gk_proj.1.bias", "model.layers.1.mlp.gate_proj.weight",
              "model.layers.0.attn.g_norm_swish_gate.weight", "model.embeddings.weight", "model.norm.weight"});
  check_plan(linear_config("gla", {"model.canon.set=b", "model.gla.output_gate=false"}), {"model.layers.0.attn.g_norm.weight"});
  check_plan(linear_config("gdn", {"model.canon.set=AbBCD"}),
             {"model.layers.0.attn.canonB.weight", "model.layers.0.mlp.both_proj.weight", "model.layers.1.attn.q_conv1d.weight"});
  check_plan(linear_config("gdn", {"model.canon.set=AC"}), {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"});
  check_plan(linear_config("mamba2", {"model.canon.set=AbBCD", "model.mamba2.mlp=true"}),
             {"backbone.layers.0.mixer.conv1d.bias", "backbone.layers.0.mlp.both_proj.weight", "backbone.norm_f.weight",
              "backbone.layers.0.pre_mlp_layernorm.weight"});
  // without b: a zero conv1d.weight placeholder, no bias
  check_plan(linear_config("mamba2", {"model.canon.set=A"}), {"backbone.layers.1.mixer.conv1d.weight"});
}

TEST(HfLinear, ConfigJsonKeys) {
  const RunConfig g = linear_config("gdn", {"model.canon.set=AbB", "model.canon.activation=silu"});
  const nlohmann::json j = hf_config_json(g, hf_export_format(g.model));
  EXPECT_EQ(j["model_type"], "GatedDeltaNetCanon");
  EXPECT_EQ(j["head_dim"], 6);   // int(32 * 0.75) / 4
  EXPECT_EQ(j["expand_v"], 2);   // 48 / 24
  EXPECT_EQ(j["use_short_conv"], true);
  EXPECT_EQ(j["canon_activation"], true);
  const RunConfig m = linear_config("mamba2", {"model.canon.set=A"});
  const nlohmann::json k = hf_config_json(m, hf_export_format(m.model));
  EXPECT_EQ(k["num_heads"], 4);
  EXPECT_EQ(k["head_dim"], 16);
  EXPECT_EQ(k["noconv1d"], true);
  EXPECT_EQ(k["use_conv_bias"], false);
  EXPECT_EQ(k["mlp_type"], nullptr);
}

// config.json -> import -> the same resolved model.
TEST(HfLinear, ConfigJsonRoundTrip) {
  for (const auto& [family, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"gla", {"model.canon.set=AbCD", "model.gla.feature_map=silu", "model.gla.clamp_min=-0.25"}},
           {"gla", {"model.canon.set=b", "model.gla.output_gate=false", "model.tie_embeddings=true"}},
           {"gdn", {"model.canon.set=AbBCD", "model.canon.activation=silu", "model.canon.residual=false"}},
           {"gdn", {"model.canon.set=AC", "model.delta.expand_v=2.25"}},
           {"mamba2", {"model.canon.set=AbBCD", "model.mamba2.mlp=true", "model.recurrent.conv_kernel=3"}},
           {"mamba2", {"model.canon.set=AB", "model.mamba2.headdim=8"}}}) {
    const RunConfig cfg = linear_config(family, sets);
    const nlohmann::json j = hf_config_json(cfg, hf_export_format(cfg.model));
    RunConfig back = cfg;
    back.model = model_config_from_hf(j, "config.json");
    // Mamba2 layers size their heads by headdim alone; model.n_heads has no counterpart there.
    if (family == "mamba2") back.model.n_heads = cfg.model.n_heads;
    resolve_and_validate(back);
    EXPECT_EQ(config_to_json(back)["model"], config_to_json(cfg)["model"]) << j.dump();
  }
}

std::string import_error(nlohmann::json j) {
  try {
    model_config_from_hf(j, "x/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfLinear, ImportRefusesWhatCanonlabCannotRepresent) {
  const RunConfig g = linear_config("gla", {"model.canon.set=AbC"});
  nlohmann::json gla = hf_config_json(g, hf_export_format(g.model));
  EXPECT_EQ(import_error(gla), "");
  gla["output_gate_rank"] = 16;
  EXPECT_NE(import_error(gla).find("output_gate_rank = 16"), std::string::npos);
  gla["output_gate_rank"] = nullptr;
  gla["use_short_conv"] = false;
  EXPECT_NE(import_error(gla).find("use_short_conv = false"), std::string::npos);
  gla["use_short_conv"] = true;
  gla["canon_set"] = "AbB";
  EXPECT_NE(import_error(gla).find("canon_set"), std::string::npos);
  const RunConfig m = linear_config("mamba2", {"model.canon.set=A"});
  nlohmann::json mamba = hf_config_json(m, hf_export_format(m.model));
  EXPECT_EQ(import_error(mamba), "");
  mamba["n_groups"] = 8;
  EXPECT_NE(import_error(mamba).find("n_groups = 8"), std::string::npos);
  mamba["n_groups"] = 1;
  mamba["residual_in_fp32"] = true;
  EXPECT_NE(import_error(mamba).find("residual_in_fp32 = true"), std::string::npos);
  const RunConfig d = linear_config("gdn", {});
  nlohmann::json gdn = hf_config_json(d, hf_export_format(d.model));
  gdn["expand_v"] = 1.5;
  EXPECT_NE(import_error(gdn).find("expand_v = 1.5"), std::string::npos);
}

}  // namespace
}  // namespace canonlab
