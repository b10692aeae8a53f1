// The backend's capability query (engine/backend/capabilities.h): each module says which op groups it needs, and a
// model on a backend that lacks one is refused before its parameters are allocated, naming train.device, the op
// group and the module and setting that need it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "config/config.h"
#include "engine/backend/cpu_backend.h"
#include "expect_error.h"
#include "models/decoder_model.h"

namespace canonlab {
namespace {

std::set<OpGroup> groups_of(const std::vector<OpNeed>& needs) {
  std::set<OpGroup> out;
  for (const OpNeed& n : needs) out.insert(n.group);
  return out;
}

DecoderModel<float> model_of(const std::vector<std::string>& sets,
                             std::shared_ptr<Backend<float>> backend = std::make_shared<CpuBackend<float>>()) {
  const RunConfig cfg = config_from_yaml_string("model: {d_model: 16, n_layers: 2, n_heads: 2}\n", sets);
  return DecoderModel<float>(cfg.model, 1, std::move(backend));
}

// The CPU backend without one op group: what a GPU backend that has not landed a family yet looks like.
class CpuBackendWithout final : public CpuBackend<float> {
 public:
  explicit CpuBackendWithout(OpGroup missing) : missing_(missing) {}
  std::string name() const override { return "test"; }
  bool supports(OpGroup g) const override { return g != missing_; }

 private:
  OpGroup missing_;
};

TEST(BackendCapabilities, EachModuleSaysWhatItNeeds) {
  EXPECT_EQ(groups_of(model_of({}).needs()), (std::set<OpGroup>{OpGroup::core, OpGroup::attention}));
  EXPECT_EQ(groups_of(model_of({"model.canon.set=ABCD"}).needs()),
            (std::set<OpGroup>{OpGroup::core, OpGroup::attention, OpGroup::canon}));
  EXPECT_EQ(groups_of(model_of({"model.family=gla", "model.recurrent.kernel=naive"}).needs()),
            (std::set<OpGroup>{OpGroup::core, OpGroup::gla, OpGroup::reference_scans}));
  EXPECT_EQ(groups_of(model_of({"model.family=mamba2"}).needs()), (std::set<OpGroup>{OpGroup::core, OpGroup::mamba2}));
  EXPECT_EQ(groups_of(model_of({"model.family=gdn", "model.canon.set=B"}).needs()),
            (std::set<OpGroup>{OpGroup::core, OpGroup::delta_rule, OpGroup::canon}));
  const std::vector<OpNeed> needs = model_of({"model.canon.set=AC", "model.canon.dynamic=2"}).needs();
  EXPECT_TRUE(std::ranges::any_of(needs, [](const OpNeed& n) {
    return n.group == OpGroup::dynamic_canon && n.setting == "layers.1.canon_c (model.canon.dynamic)";
  }));
}

TEST(BackendCapabilities, AModelABackendCannotRunIsRefusedNamingTheOpsAndTheSettings) {
  const std::string error = test_support::error_of([] {
    model_of({"model.family=gla", "model.recurrent.kernel=naive"}, std::make_shared<CpuBackendWithout>(OpGroup::gla));
  });
  EXPECT_CONTAINS(error, "train.device: the test backend cannot run this model");
  EXPECT_CONTAINS(error, "the GLA scan, needed by layers.0.mixer (model.family / model.layer_pattern), "
                         "layers.1.mixer (model.family / model.layer_pattern)");
  EXPECT_CONTAINS(error, "train on train.device: cpu");
  EXPECT_EQ(error.find("reference"), std::string::npos) << "the groups it has are not listed: " << error;

  const std::string naive = test_support::error_of([] {
    model_of({"model.family=mamba2", "model.recurrent.kernel=naive"},
             std::make_shared<CpuBackendWithout>(OpGroup::reference_scans));
  });
  EXPECT_CONTAINS(naive, "the reference (naive) scans, needed by layers.0.mixer (model.recurrent.kernel: naive)");
  // a backend with every group the model needs builds it
  EXPECT_NO_THROW(model_of({"model.family=mamba2"}, std::make_shared<CpuBackendWithout>(OpGroup::gla)));
}

TEST(BackendCapabilities, TheCpuBackendRunsEveryGroup) {
  const CpuBackend<float> cpu;
  for (OpGroup g : {OpGroup::core, OpGroup::attention, OpGroup::canon, OpGroup::dynamic_canon, OpGroup::mamba2,
                    OpGroup::gla, OpGroup::delta_rule, OpGroup::reference_scans})
    EXPECT_TRUE(cpu.supports(g)) << op_group_name(g);
}

}  // namespace
}  // namespace canonlab
