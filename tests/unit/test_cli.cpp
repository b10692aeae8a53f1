// The command line as a user meets it: config errors exit non-zero naming the key path, and a tiny run
// writes every promised output file, then `eval` reads the checkpoint back.
#include <gtest/gtest.h>

#include "cli_runner.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

using canonlab::test_support::run_cli;
using Result = canonlab::test_support::CliResult;


std::string config_path(const std::string& name) { return std::string(CANONLAB_SOURCE_DIR) + "/configs/" + name; }

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("canonlab_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

void expect_config_error(const std::string& sets, const std::string& must_contain) {
  Result r = run_cli("train " + config_path("demo.yaml") + " " + sets + " --out " + temp_dir("err"));
  EXPECT_NE(r.exit_code, 0) << sets;
  EXPECT_NE(r.output.find(must_contain), std::string::npos) << sets << " printed:\n" << r.output;
}

}  // namespace

TEST(Cli, UnknownKeySuggestsTheNearestKey) {
  expect_config_error("--set model.atention.position=rope", "model.attention.position");
}
TEST(Cli, WrongTypeNamesTheKey) { expect_config_error("--set model.d_model=abc", "model.d_model"); }
TEST(Cli, OutOfRangeNamesTheKey) { expect_config_error("--set train.steps=0", "train.steps"); }
TEST(Cli, RopeDimLargerThanHeadDimIsRejected) {
  expect_config_error("--set model.attention.position=rope --set model.attention.rope_dim=64",
                      "model.attention.rope_dim");
}
TEST(Cli, KeyShiftLayerOutOfRangeIsRejected) {
  expect_config_error("--set model.attention.key_shift.layers=[5]", "model.attention.key_shift.layers");
}

TEST(Cli, TrainWritesEveryOutputAndEvalReadsTheCheckpoint) {
  const std::string out = temp_dir("run");
  Result r = run_cli("train " + config_path("demo.yaml") +
                     " --set train.steps=6 --set train.eval_every=3 --set train.checkpoint_every=3"
                     " --set probe.n_sequences=8 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"config.resolved.yaml", "metrics.jsonl", "metrics.csv", "summary.json", "checkpoints/latest.json",
                        "checkpoints/step_00000006.model.safetensors", "checkpoints/step_00000006.state.safetensors"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  // train.keep_checkpoints (default 2) prunes older step checkpoints: steps 0 and 3 and 6 were written.
  EXPECT_FALSE(fs::exists(fs::path(out) / "checkpoints/step_00000000.model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "checkpoints/step_00000003.model.safetensors"));
  EXPECT_NE(r.output.find("global_ipmr"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("copy_acc"), std::string::npos) << r.output;

  Result e = run_cli("eval " + out);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("IPMR at delta=1"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("top heads:"), std::string::npos) << e.output;

  // --set evaluates the same weights on a changed task; the weights fix model.*, so a model key is refused.
  Result plain = run_cli("eval " + out + " --json");
  Result shorter = run_cli("eval " + out + " --json --set task.n_symbols=8");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(shorter.exit_code, 0) << shorter.output;
  EXPECT_NE(plain.output, shorter.output);
  Result model_key = run_cli("eval " + out + " --set model.d_model=32");
  EXPECT_NE(model_key.exit_code, 0);
  EXPECT_NE(model_key.output.find("model.d_model=32"), std::string::npos) << model_key.output;
  Result bad_value = run_cli("eval " + out + " --set task.n_symbols=abc");
  EXPECT_NE(bad_value.exit_code, 0);
  EXPECT_NE(bad_value.output.find("task.n_symbols"), std::string::npos) << bad_value.output;

  // The resolved config is itself a valid config that reproduces the run's settings.
  Result again = run_cli("train " + out + "/config.resolved.yaml --set train.steps=1 --quiet --out " + out + "_again");
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

TEST(Cli, EvalOfACorruptCheckpointFailsCleanly) {
  const std::string dir = temp_dir("corrupt");
  fs::create_directories(dir);
  std::ofstream(dir + "/x.model.safetensors") << "not a checkpoint at all";
  Result r = run_cli("eval " + dir + "/x.model.safetensors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("corrupt"), std::string::npos) << r.output;
}
