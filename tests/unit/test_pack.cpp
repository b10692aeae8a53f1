// Packs (train/pack.h): runs trained side by side in one process give the bits each gives alone, a failing run
// ends alone, a pack resumes from its runs' checkpoints, and runs share a pack only when their shapes agree.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "bad_inputs_support.h"
#include "config/config.h"
#include "train/checkpoint.h"
#include "train/pack.h"
#include "train/trainer.h"
#include "run_records.h"

using namespace canonlab;
namespace fs = std::filesystem;

namespace {

// A 4-layer sign-STE model on the copy task (the key-shift study's E1-Bk0, smaller), one thread per run.
RunConfig pack_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.d_model=32",        "model.n_heads=2",           "model.n_layers=4",
                                   "model.attention.position=alibi", "model.attention.scoring=sign_ste",
                                   "model.attention.key_shift.layers=[0]", "task.vocab=16", "task.n_symbols=6",
                                   "train.batch_size=8",      "train.steps=8",             "train.warmup_steps=2",
                                   "train.eval_every=4",      "train.checkpoint_every=4",  "train.log_every=1",
                                   "train.lr=0.003",          "train.threads=1",           "probe.n_sequences=8"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config_from_yaml_string("{}", sets);
}

using test_support::read_text;
using test_support::temp_dir;

// What must be identical between a run trained in a pack and alone: every checkpoint file's bytes (model and
// AdamW state at every checkpoint) and every metrics record but its wall-clock fields.
std::string run_fingerprint(const std::string& dir) {
  std::string out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) out += f.filename().string() + ":" + read_text(f) + "\n";
  for (const nlohmann::json& record : test_support::metrics_records(dir)) out += record.dump() + "\n";
  return out;
}

TrainOptions quiet(const std::string& dir) {
  TrainOptions o;
  o.out_dir = dir;
  o.progress = false;
  o.probe_at_end = false;
  return o;
}

// The study's kinds of variation: seeds, the key-shift layer, ALiBi off, the learning rate.
std::vector<RunConfig> study_configs() {
  return {pack_config({"train.seed=1"}), pack_config({"train.seed=2", "model.attention.key_shift.layers=[2]"}),
          pack_config({"train.seed=3", "model.attention.position=nope"}), pack_config({"train.lr=0.01"})};
}

}  // namespace

TEST(Pack, EachRunGivesTheBitsItGivesAloneSideBySideOrInTurn) {
  const std::vector<RunConfig> configs = study_configs();
  const std::string root = temp_dir("pack_bits");
  std::vector<std::string> alone;
  for (size_t i = 0; i < configs.size(); i++) {
    const std::string dir = root + "/alone" + std::to_string(i);
    train(configs[i], quiet(dir));
    alone.push_back(run_fingerprint(dir));
  }
  // The runs differ from each other, so a pack that mixed them up could not pass.
  for (size_t i = 1; i < alone.size(); i++) EXPECT_NE(alone[i], alone[0]) << "run " << i;
  for (const int width : {1, 2, 3}) {
    SCOPED_TRACE("width " + std::to_string(width));
    std::vector<PackMember> members;
    for (size_t i = 0; i < configs.size(); i++)
      members.push_back({configs[i], quiet(root + "/w" + std::to_string(width) + "_" + std::to_string(i))});
    const StopSignals signals;
    const std::vector<PackRunResult> results = train_pack(members, signals, width);
    ASSERT_EQ(results.size(), configs.size());
    for (size_t i = 0; i < configs.size(); i++) {
      EXPECT_EQ(results[i].end, PackRunEnd::done) << results[i].error;
      EXPECT_EQ(results[i].steps_done, 8);
      EXPECT_TRUE(fs::exists(members[i].options.out_dir + "/summary.json"));
      EXPECT_EQ(run_fingerprint(members[i].options.out_dir), alone[i]) << "run " << i;
    }
  }
  fs::remove_all(root);
}

TEST(Pack, AFailingRunEndsAloneAndItsPackMatesFinishWithTheirOwnBits) {
  const std::string root = temp_dir("pack_failing");
  const RunConfig good = pack_config({"train.seed=5"});
  train(good, quiet(root + "/alone"));
  std::vector<PackMember> members = {{good, quiet(root + "/good")},
                                     {pack_config({"train.lr=1.0e+30", "train.grad_clip=0"}), quiet(root + "/nan")},
                                     {pack_config(), quiet(root + "/a_file")},
                                     {pack_config({"train.seed=6"}), quiet(root + "/throws")}};
  std::ofstream(root + "/a_file") << "not a directory";
  // A caller's callback that throws at step 3 ends that run there (as on_step does from Python).
  members[3].options.on_metrics = [](const nlohmann::json& record) {
    if (record.value("step", 0) == 3) throw Error("stopped by the test at step 3");
  };
  const StopSignals signals;
  const std::vector<PackRunResult> results = train_pack(members, signals, 2);
  EXPECT_EQ(results[0].end, PackRunEnd::done) << results[0].error;
  EXPECT_EQ(run_fingerprint(root + "/good"), run_fingerprint(root + "/alone"));
  EXPECT_EQ(results[1].end, PackRunEnd::failed);
  EXPECT_NE(results[1].error.find("training stopped"), std::string::npos) << results[1].error;
  EXPECT_EQ(results[2].end, PackRunEnd::failed);
  EXPECT_NE(results[2].error.find("is a file, not a directory"), std::string::npos) << results[2].error;
  EXPECT_EQ(results[3].end, PackRunEnd::failed);
  EXPECT_EQ(results[3].error, "stopped by the test at step 3");
  EXPECT_EQ(results[3].steps_done, 3);
  fs::remove_all(root);
}

TEST(Pack, APackResumesFromItsRunsCheckpointsBitExactly) {
  const std::vector<RunConfig> configs = study_configs();
  const std::string root = temp_dir("pack_resume");
  std::vector<PackMember> members;
  for (size_t i = 0; i < configs.size(); i++) {
    members.push_back({configs[i], quiet(root + "/run" + std::to_string(i))});
    train(configs[i], quiet(root + "/alone" + std::to_string(i)));
  }
  // First attempt: every run ends at step 6 (its checkpoint is step 4's); the second resumes them all.
  std::vector<PackMember> first = members;
  for (PackMember& m : first)
    m.options.on_metrics = [](const nlohmann::json& record) {
      if (record.value("step", 0) == 6) throw Error("interrupted at step 6");
    };
  const StopSignals signals;
  for (const PackRunResult& r : train_pack(first, signals, 2)) EXPECT_EQ(r.end, PackRunEnd::failed);
  for (PackMember& m : members) m.options.resume = true;
  const std::vector<PackRunResult> results = train_pack(members, signals, 2);
  for (size_t i = 0; i < configs.size(); i++) {
    EXPECT_EQ(results[i].end, PackRunEnd::done) << results[i].error;
    EXPECT_EQ(run_fingerprint(members[i].options.out_dir), run_fingerprint(root + "/alone" + std::to_string(i)))
        << "run " << i;
  }
  fs::remove_all(root);
}

TEST(Pack, SideBySideNeedsOneThreadPerRun) {
  std::vector<PackMember> members = {{pack_config({"train.threads=2"}), quiet(temp_dir("pack_threads"))}};
  const StopSignals signals;
  try {
    train_pack(members, signals, 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.threads is 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pack_width(members, 8), 1);  // one run: one at a time
}

TEST(Pack, RunsShareAPackOnlyWhenTheirShapesAgree) {
  const std::string base = pack_signature(pack_config());
  // Seeds, learning rate, key-shift layer and offset, ALiBi off, the data seed: the same shapes.
  for (const std::string& same : {"train.seed=9", "train.lr=0.01", "model.attention.key_shift.layers=[3]",
                                  "model.attention.key_shift.offset=2", "model.attention.position=nope",
                                  "train.data_seed=4", "train.steps=20"})
    EXPECT_EQ(pack_signature(pack_config({same})), base) << same;
  for (const std::string& other : {"model.d_model=64", "model.canon.set=AC", "train.batch_size=16", "task.n_symbols=7",
                                   "train.threads=2", "train.precision=bf16", "train.micro_batches=2"})
    EXPECT_NE(pack_signature(pack_config({other})), base) << other;
}
