// The command line as a user meets it: config errors exit non-zero naming the key path, a tiny run writes every
// promised output file, then `eval` reads the checkpoint back, and `debug-dump` runs a trained checkpoint on a
// batch the user wrote (and refuses every malformed token file, naming it).
#include <gtest/gtest.h>

#include "cli_runner.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "io/safetensors.h"

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

// A bad option or option value exits 2 like every other bad input, with CLI11's message naming it; --help exits 0.
TEST(Cli, BadOptionsExitTwoNamingTheOptionAndHelpExitsZero) {
  Result r = run_cli("train " + config_path("demo.yaml") + " --bogus");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
  r = run_cli("sweep " + config_path("sweeps/ks-placement-4L-9seeds.yaml") + " --jobs many --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--jobs"), std::string::npos) << r.output;
  r = run_cli("train " + config_path("no-such-file.yaml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no-such-file.yaml"), std::string::npos) << r.output;
  r = run_cli("train --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--dry-run"), std::string::npos) << r.output;
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

// ---- debug-dump --weights CHECKPOINT --tokens FILE -------------------------------------------------------------

namespace {

using canonlab::SafetensorsFile;
using canonlab::SafetensorsWriter;
using canonlab::read_safetensors;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A token file in the safetensors format, as a PyTorch user writes it with safetensors.torch.save_file.
struct TokenFile {
  std::vector<int64_t> tokens, targets;
  std::vector<float> loss_mask;
  std::vector<int64_t> shape;
  void write(const std::string& path) const {
    SafetensorsWriter w;
    if (!tokens.empty()) w.add("tokens", std::span<const int64_t>(tokens), shape);
    if (!targets.empty()) w.add("targets", std::span<const int64_t>(targets), shape);
    if (!loss_mask.empty()) w.add("loss_mask", std::span<const float>(loss_mask), shape);
    w.write_atomic(path);
  }
};

// Trains the demo model for 6 steps (once per test binary run) and returns the run directory.
const std::string& trained_run() {
  static const std::string run = [] {
    const std::string out = temp_dir("dd_run");
    Result r = run_cli("train " + config_path("demo.yaml") +
                       " --set train.steps=6 --set train.checkpoint_every=6 --set probe.n_sequences=8 --quiet"
                       " --out " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }();
  return run;
}

bool same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (const auto& t : a.tensors) {
    const auto* u = b.find(t.name);
    if (!u || u->shape != t.shape || u->data != t.data) return false;
  }
  return true;
}

}  // namespace

TEST(Cli, DebugDumpRunsATrainedCheckpointOnTheUsersBatch) {
  const std::string run = trained_run();
  const std::string dir = temp_dir("dd");
  fs::create_directories(dir);
  // Two sequences of 8 ids (every test vocabulary has ids 0..7), a blank line and Windows line ends.
  write_text(dir + "/batch.txt", "0 1 2 3 4 5 6 7\r\n7 6\t5 4 3 2 1 0\n\n");

  // A fresh dump into the directory first: its trajectory.json must not survive the trained dump below.
  Result fresh =
      run_cli("debug-dump " + config_path("demo.yaml") + " --tokens " + dir + "/batch.txt --out " + dir + "/fresh");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_TRUE(fs::exists(dir + "/fresh/trajectory.json"));
  fs::copy(dir + "/fresh", dir + "/a", fs::copy_options::recursive);
  Result a = run_cli("debug-dump --weights " + run + " --tokens " + dir + "/batch.txt --out " + dir + "/a");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("weights of step 6"), std::string::npos) << a.output;
  EXPECT_FALSE(fs::exists(dir + "/a/trajectory.json"));

  // The weights are the checkpoint's (and not the initialisation the config would give).
  const SafetensorsFile ckpt = read_safetensors(run + "/checkpoints/step_00000006.model.safetensors");
  const SafetensorsFile model = read_safetensors(dir + "/a/model.safetensors");
  EXPECT_TRUE(same_tensors(model, ckpt));
  EXPECT_FALSE(same_tensors(read_safetensors(dir + "/fresh/model.safetensors"), ckpt));
  const int V = int(ckpt.get("tok_emb.weight").shape[0]);

  // The batch is the file's, with next-token targets and the last position left out of the loss.
  const SafetensorsFile batch = read_safetensors(dir + "/a/batch.safetensors");
  EXPECT_EQ(batch.get("tokens").to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(batch.get("targets").to_vector<int32_t>(),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 0, 6, 5, 4, 3, 2, 1, 0, 0}));
  EXPECT_EQ(batch.get("loss_mask").to_vector<float>(),
            (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0}));
  const SafetensorsFile ref = read_safetensors(dir + "/a/reference.safetensors");
  EXPECT_EQ(ref.get("logits").shape, (std::vector<int64_t>{2, 8, V}));
  EXPECT_NE(ref.get("logits").data, read_safetensors(dir + "/fresh/reference.safetensors").get("logits").data);
  for (const auto& t : ckpt.tensors) EXPECT_NE(ref.find("grad." + t.name), nullptr) << t.name;

  // The same batch as safetensors, targets and mask spelled out, gives byte-identical results.
  TokenFile same{{0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0},
                 {1, 2, 3, 4, 5, 6, 7, 0, 6, 5, 4, 3, 2, 1, 0, 0},
                 {1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0},
                 {2, 8}};
  same.write(dir + "/same.safetensors");
  Result b =
      run_cli("debug-dump --weights " + run + "/checkpoints --tokens " + dir + "/same.safetensors --out " + dir + "/b");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(read_bytes(dir + "/a/reference.safetensors") == read_bytes(dir + "/b/reference.safetensors"));

  // Given targets and mask are used as given: only position (0, 0), with target 5, counts, so the loss is that
  // position's cross-entropy computed here from the first dump's logits.
  TokenFile one = same;
  one.targets[0] = 5;
  one.loss_mask.assign(16, 0.f);
  one.loss_mask[0] = 1.f;
  one.write(dir + "/one.safetensors");
  Result c = run_cli("debug-dump --weights " + run + " --tokens " + dir + "/one.safetensors --out " + dir + "/c");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const std::vector<float> logits = ref.get("logits").to_vector<float>();
  double max_logit = logits[0], sum = 0;
  for (int v = 0; v < V; v++) max_logit = std::max(max_logit, double(logits[v]));
  for (int v = 0; v < V; v++) sum += std::exp(double(logits[v]) - max_logit);
  const double expected = std::log(sum) + max_logit - logits[5];
  const float loss = read_safetensors(dir + "/c/reference.safetensors").get("loss").to_vector<float>()[0];
  EXPECT_NEAR(loss, expected, 1e-6 + 1e-5 * expected);

  // Models without learned positions run any length, here longer than the training sequences.
  std::string long_line;
  for (int t = 0; t < 200; t++) long_line += std::to_string(t % 8) + " ";
  write_text(dir + "/long.txt", long_line + "\n");
  Result d = run_cli("debug-dump --weights " + run + " --tokens " + dir + "/long.txt --out " + dir + "/d");
  EXPECT_EQ(d.exit_code, 0) << d.output;
}

TEST(Cli, DebugDumpArgumentsAreCheckedBeforeAnythingIsWritten) {
  const std::string run = trained_run();
  const std::string out = temp_dir("dd_args") + "/out";
  struct Case {
    std::string args, must_contain;
  };
  const std::vector<Case> cases = {
      {"--out " + out, "needs a CONFIG"},
      {config_path("demo.yaml") + " --weights " + run + " --out " + out, "not both"},
      {"--weights " + run + " --set model.d_model=32 --out " + out, "model.d_model=32"},
      {"--weights " + run + "/nothing-here --out " + out, "nothing-here"},
  };
  for (const Case& c : cases) {
    Result r = run_cli("debug-dump " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.must_contain), std::string::npos) << c.args << " printed:\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
}

TEST(Cli, DebugDumpRefusesEveryMalformedTokenFileNamingIt) {
  const std::string dir = temp_dir("dd_bad");
  fs::create_directories(dir);
  const std::string out = dir + "/out";
  std::string too_long;
  for (int t = 0; t <= 65536; t++) too_long += "1 ";

  struct Case {
    std::string name, must_contain;
    std::function<void(const std::string&)> write;
    std::string sets = "";
  };
  auto text = [](std::string s) { return [s](const std::string& p) { write_text(p, s); }; };
  auto tensors = [](TokenFile f) { return [f](const std::string& p) { f.write(p); }; };
  const std::vector<Case> cases = {
      {"ragged.txt", "line 2: has 2 tokens, the first sequence 3", text("0 1 2\n0 1\n")},
      {"word.txt", "line 1: 'x' is not a token id", text("0 1 x\n")},
      {"float.txt", "'1.5' is not a token id", text("0 1.5\n")},
      {"range.txt", "tokens[1, 2] = 99999 is not a token id of this model", text("0 1 2\n0 1 99999\n")},
      {"negative.txt", "tokens[0, 1] = -1", text("0 -1\n")},
      {"empty.txt", "holds no sequence", text("\n \n")},
      {"single.txt", "T must be at least 2", text("5\n5\n")},
      {"huge.txt", "at most 65536", text(too_long)},
      {"missing.txt", "no such file or directory", nullptr},
      {"corrupt.safetensors", "corrupt", text("not a safetensors file")},
      {"no-tokens.safetensors", "has no tensor 'tokens'", tensors({{}, {1, 2}, {}, {1, 2}})},
      {"rank1.safetensors", "'tokens' has shape (4); it must be (B, T)", tensors({{0, 1, 2, 3}, {}, {}, {4}})},
      {"extra.safetensors", "unexpected tensor 'positions'",
       [](const std::string& p) {
         const std::vector<int32_t> v = {0, 1};
         SafetensorsWriter w;
         w.add("tokens", std::span<const int32_t>(v), {1, 2});
         w.add("positions", std::span<const int32_t>(v), {1, 2});
         w.write_atomic(p);
       }},
      {"float-tokens.safetensors", "must be I32 or I64",
       [](const std::string& p) {
         const std::vector<float> v = {0, 1};
         SafetensorsWriter w;
         w.add("tokens", std::span<const float>(v), {1, 2});
         w.write_atomic(p);
       }},
      {"targets-shape.safetensors", "'targets' has shape (1, 3), 'tokens' (1, 2)",
       [](const std::string& p) {
         const std::vector<int64_t> t = {0, 1}, u = {1, 2, 3};
         SafetensorsWriter w;
         w.add("tokens", std::span<const int64_t>(t), {1, 2});
         w.add("targets", std::span<const int64_t>(u), {1, 3});
         w.write_atomic(p);
       }},
      {"targets-range.safetensors", "targets[0, 1] = 99999", tensors({{0, 1}, {1, 99999}, {}, {1, 2}})},
      {"mask-value.safetensors", "loss_mask holds 0.5", tensors({{0, 1}, {1, 2}, {1.f, 0.5f}, {1, 2}})},
      {"mask-zero.safetensors", "loss_mask is all 0", tensors({{0, 1}, {1, 2}, {0.f, 0.f}, {1, 2}})},
      {"mask-last.safetensors", "loss_mask[0, 1] is 1, but without 'targets'",
       tensors({{0, 1}, {}, {1.f, 1.f}, {1, 2}})},
      {"big.safetensors", "B x T = 300 x 300 = 90000 tokens",
       tensors({std::vector<int64_t>(90000, 1), {}, {}, {300, 300}})},
      // Learned positions fix the longest sequence: here 2 * 4 + 1 = 9 tokens.
      {"learned.txt", "longer than the model's learned positions allow (model.max_seq_len = 9)",
       text("0 1 2 3 4 5 6 7 0 1\n"), "--set model.attention.position=learned --set task.n_symbols=4"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.name;
    if (c.write) c.write(path);
    Result r = run_cli("debug-dump " + config_path("demo.yaml") + " " + c.sets + " --tokens " + path + " --out " + out);
    EXPECT_EQ(r.exit_code, 2) << c.name << "\n" << r.output;
    EXPECT_NE(r.output.find("token file '" + path + "'"), std::string::npos) << c.name << " printed:\n" << r.output;
    EXPECT_NE(r.output.find(c.must_contain), std::string::npos) << c.name << " printed:\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << c.name << ": a refused token file must leave nothing behind";
  }
  // The learned-position limit is the model's: the same file fits a longer task's model.
  Result fits = run_cli("debug-dump " + config_path("demo.yaml") + " --set model.attention.position=learned --tokens " +
                        dir + "/learned.txt --out " + out);
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}
