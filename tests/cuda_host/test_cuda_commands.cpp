// A GPU run's other commands over the host stand-in of the CUDA layer: packed runs give each run's own bits; eval,
// probe (the materialising attention path), generate and export work on a run trained with train.device=cuda, through
// the CLI (canonlab_host_cuda: the CLI with the stand-in as its CUDA backend).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bad_inputs_support.h"
#include "cli_runner.h"
#include "config/config.h"
#include "run_records.h"
#include "train/checkpoint.h"
#include "train/pack.h"
#include "train/trainer.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using test_support::read_text;
using test_support::temp_dir;

RunConfig study_config(std::vector<std::string> sets) {
  std::vector<std::string> all = {"train.device=cuda", "train.steps=8",   "train.batch_size=4", "train.threads=1",
                                  "train.eval_every=4", "train.log_every=2", "model.d_model=32", "model.n_layers=2",
                                  "probe.n_sequences=8", "train.eval_batches=1"};
  all.insert(all.end(), sets.begin(), sets.end());
  return load_config(std::string(CANONLAB_SOURCE_DIR) + "/configs/E1-Bk0.yaml", all);
}

TrainOptions quiet(const std::string& dir) {
  TrainOptions o;
  o.out_dir = dir;
  o.progress = false;
  return o;
}

// Four runs of the key-shift study packed side by side on the GPU stand-in (one stream and one step graph each):
// each gives the bits it gives alone.
TEST(CudaBackendOnHost, PackedRunsGiveTheBitsOfSingleRuns) {
  const std::vector<RunConfig> configs = {study_config({"train.seed=1"}),
                                          study_config({"model.attention.key_shift.layers=[1]"}),
                                          study_config({"model.attention.key_shift.layers=[1]",
                                                        "model.attention.key_shift.offset=2"}),
                                          study_config({"model.attention.position=nope"})};
  const std::string root = temp_dir("pack");
  std::vector<std::string> alone;
  for (size_t i = 0; i < configs.size(); i++) {
    train(configs[i], quiet(root + "/alone" + std::to_string(i)));
    alone.push_back(read_text(latest_model_path(root + "/alone" + std::to_string(i) + "/checkpoints")));
  }
  for (size_t i = 1; i < alone.size(); i++) EXPECT_FALSE(alone[i] == alone[0]) << "runs 0 and " << i << " agree";
  std::vector<PackMember> members;
  for (size_t i = 0; i < configs.size(); i++) members.push_back({configs[i], quiet(root + "/pack" + std::to_string(i))});
  const StopSignals signals;
  const std::vector<PackRunResult> results = train_pack(members, signals, 2);
  for (size_t i = 0; i < configs.size(); i++) {
    EXPECT_EQ(results[i].end, PackRunEnd::done) << results[i].error;
    EXPECT_TRUE(read_text(latest_model_path(members[i].options.out_dir + "/checkpoints")) == alone[i])
        << "run " << i << ": its packed checkpoint differs from its own";
    EXPECT_EQ(test_support::metrics_records(members[i].options.out_dir),
              test_support::metrics_records(root + "/alone" + std::to_string(i)));
  }
  fs::remove_all(root);
}

// eval, probe (attention maps through the materialising kernel), generate (the forward pass on the device each
// token: the cached decoder reads host weights) and export on a run trained on train.device=cuda; eval on the CPU of
// the same checkpoint agrees.
TEST(CudaBackendOnHost, EvalProbeGenerateAndExportWorkOnAGpuRun) {
  const std::string root = temp_dir("commands"), run = root + "/run";
  const std::string config = std::string(CANONLAB_SOURCE_DIR) + "/configs/E1-Bk0.yaml";
  const std::string sets = " --set train.device=cuda --set train.steps=20 --set model.d_model=32 --set "
                           "train.batch_size=8 --set probe.n_sequences=8 --set train.eval_batches=1 --quiet";
  auto r = test_support::run_cli("train " + config + sets + " --out " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(read_text(run + "/summary.json").find("\"device\": \"cuda:0\""), std::string::npos);

  r = test_support::run_cli("eval " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string on_gpu = r.output;
  r = test_support::run_cli("eval " + run + " --set train.device=cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(on_gpu.find("copy_acc"), std::string::npos) << on_gpu;

  r = test_support::run_cli("probe " + run + " --out " + root + "/probe");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(root + "/probe/index.html")) << r.output;

  r = test_support::run_cli("generate " + run + " --prompt 5,3,7,1 --max-new 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(r.output.empty());

  r = test_support::run_cli("export " + run + " --to hf --out " + root + "/hf");
  // E1-Bk0 (ALiBi, sign-STE, key shift) has no Hugging Face counterpart: the refusal names it, as for a CPU run
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("alibi"), std::string::npos) << r.output;
  const std::string rope = root + "/rope";
  r = test_support::run_cli("train " + std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml --set train.device=cuda "
                            "--set train.steps=4 --set model.d_model=32 --set model.attention.position=rope "
                            "--set model.mlp.kind=swiglu --quiet --out " + rope);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test_support::run_cli("export " + rope + " --to hf --out " + root + "/hf");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(root + "/hf/model.safetensors")) << r.output;
  fs::remove_all(root);
}

}  // namespace
}  // namespace canonlab
