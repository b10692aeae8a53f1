// Regression tests for the reliability audit of issue 25, each reproducing a finding that used to lose data or change
// results without a word:
// F1  a fresh `canonlab train` replaced a finished run kept without checkpoints/;
// F2  a resume took the optimizer state of another run;
// F9  a checkpoint without its data checksum (or of format 1) was read silently;
// F10 a dead writer's temp file stayed forever once its pid was in use again.

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "bad_inputs_support.h"
#include "cli_runner.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/run_directory.h"

using namespace canonlab;
using namespace canonlab::test_support;

namespace {

// Path relative to root -> content of every file below it; equal snapshots mean nothing was changed. The lock file
// records the pid of whoever last held it.
std::map<std::string, std::string> files_under(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().filename() != ".train.lock")
      files[fs::relative(e.path(), root).string()] = read_text(e.path());
  return files;
}

// The tiny run as a config file, for the command line.
std::string write_config(const std::string& dir, const std::vector<std::string>& sets = {}) {
  const std::string path = dir + "/ok.yaml";
  write_text(path, config_to_yaml(tiny_config(sets)));
  return path;
}

CliResult train_cli(const std::string& config, const std::string& run, const std::string& extra = "") {
  return run_cli("train " + config + " --quiet --out " + run + (extra.empty() ? "" : " " + extra));
}

// A run of tiny_config rolled back to its step-6 checkpoint (as an interruption between the saves of steps 6 and 8
// leaves it), and the state file of the same step of a run with another seed, for a resume to be offered.
struct InterruptedRun {
  RunConfig cfg = tiny_config();
  std::string dir, model, state, foreign_state;
};
InterruptedRun interrupted_run_and_another(const std::string& name) {
  InterruptedRun r;
  r.dir = temp_dir(name);
  const std::string other = temp_dir(name + "_other");
  train_quietly(r.cfg, r.dir);
  train_quietly(tiny_config({"train.seed=7"}), other);
  const fs::path ckpts = fs::path(r.dir) / "checkpoints";
  fs::remove(ckpts / "step_00000008.model.safetensors");
  fs::remove(ckpts / "step_00000008.state.safetensors");
  write_text(ckpts / "latest.json", R"({"step": 6, "model": "step_00000006.model.safetensors", "state": "step_00000006.state.safetensors"})");
  r.model = (ckpts / "step_00000006.model.safetensors").string();
  r.state = (ckpts / "step_00000006.state.safetensors").string();
  r.foreign_state = other + "/checkpoints/step_00000006.state.safetensors";
  return r;
}

// The final model file of a tiny run trained in a directory of its own.
std::string trained_model_file(const std::string& name) {
  const std::string run = temp_dir(name);
  train_quietly(tiny_config(), run);
  return latest_model_path(run + "/checkpoints");
}

// Removes the metadata entry "key":"value" (a value without quotes in it) from a compact safetensors header.
void erase_entry(std::string& header, const std::string& key) {
  const size_t at = header.find("\"" + key + "\":\"");
  ASSERT_NE(at, std::string::npos) << key;
  const size_t end = header.find('"', at + key.size() + 4) + 1;
  header.erase(at, end - at + (header[end] == ',' ? 1 : 0));
}

// Recomputes canonlab.header_checksum after an edit, as anyone editing a checkpoint by hand can.
void reseal(std::string& header) {
  const std::string key = std::string("\"") + kHeaderChecksumKey + "\":\"";
  const size_t at = header.find(key) + key.size();
  header.replace(at, 16, "0000000000000000");
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", (unsigned long long)xxh64(std::as_bytes(std::span(header))));
  header.replace(at, 16, digits);
}

}  // namespace

// F1. `cp -r RUN x; rm -rf x/checkpoints; canonlab train ok.yaml --out x --set train.seed=7` replaced x's summary,
// metrics and config and exited 0.
TEST(RunIntegrity, FreshTrainRefusesADirectoryThatHoldsARun) {
  const std::string dir = temp_dir("f1");
  const std::string config = write_config(dir), run = dir + "/x";
  ASSERT_EQ(train_cli(config, run).exit_code, 0);
  fs::remove_all(run + "/checkpoints");
  const auto before = files_under(run);

  CliResult r = train_cli(config, run, "--set train.seed=7");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: '" + run + "' already holds a run (summary.json, metrics.jsonl, metrics.csv); a new "
                            "run there would replace it, so nothing was changed. It has no checkpoint to continue from: "
                            "choose another --out, or pass --force to move its files to '" + run + "/superseded/<time>/' "
                            "and train afresh");
  EXPECT_EQ(files_under(run), before);

  // A run that has its checkpoints is pointed to --resume.
  const std::string other = dir + "/y";
  ASSERT_EQ(train_cli(config, other).exit_code, 0);
  r = train_cli(config, other);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "already holds a run (summary.json, metrics.jsonl, metrics.csv, checkpoints/); a new run "
                            "there would replace it, so nothing was changed. Continue it with --resume, choose another --out,");
}

// F1. --force keeps the earlier run whole under RUN/superseded/<time>/ and trains afresh; with --resume it is refused.
TEST(RunIntegrity, ForceMovesTheEarlierRunAside) {
  const std::string dir = temp_dir("f1_force");
  const std::string config = write_config(dir), run = dir + "/x";
  ASSERT_EQ(train_cli(config, run).exit_code, 0);
  const auto before = files_under(run);

  CliResult r = train_cli(config, run, "--force --resume");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: --resume continues the run in '" + run + "' and --force starts a new one there "
                            "(moving the earlier run aside); pass one of them");
  EXPECT_EQ(files_under(run), before);

  r = train_cli(config, run, "--force --set train.seed=7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "--force: moved the earlier run's summary.json, metrics.jsonl, metrics.csv, "
                            "config.resolved.yaml, checkpoints, tb from '" + run + "' to '" + run + "/superseded/");
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(run + "/superseded")) aside.push_back(e.path());
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(files_under(aside[0]), before) << "the earlier run must be kept byte for byte";
  EXPECT_EQ(load_config(run + "/config.resolved.yaml", {}).train.seed, 7u);
  EXPECT_TRUE(fs::exists(run + "/summary.json"));
}

// F1. What an attempt that ended before recording anything leaves (its config, empty metrics files, the step-0
// files of a first save cut short before latest.json) and a sweep's own files are no run: no --force needed there.
TEST(RunIntegrity, LeftoversWithoutResultsAreNoRun) {
  const std::string run = temp_dir("f1_leftovers");
  fs::create_directories(run + "/checkpoints");
  write_text(run + "/checkpoints/step_00000000.model.safetensors", "partial");
  write_text(run + "/config.resolved.yaml", "model: {}\n");
  write_text(run + "/metrics.jsonl", "");
  write_text(run + "/metrics.csv", "step,split,loss,lr,grad_norm,copy_acc,tokens_per_s,elapsed_s\n");
  for (const char* sweep_file : {"run.yaml", "status.json", "train.log"}) write_text(run + "/" + sweep_file, "{}");
  EXPECT_TRUE(earlier_run_results(run).empty());
  ASSERT_NO_THROW(train_quietly(tiny_config(), run));
  EXPECT_FALSE(fs::exists(run + "/superseded"));
  EXPECT_EQ(earlier_run_results(run),
            (std::vector<std::string>{"summary.json", "metrics.jsonl", "metrics.csv", "checkpoints/"}));
}

// F2. Another run's state file of the same shapes, put beside this run's model file, was resumed from without a
// word, and the final model silently differed from the run's own.
TEST(RunIntegrity, ResumeRefusesTheStateFileOfAnotherRun) {
  const InterruptedRun run = interrupted_run_and_another("f2");
  fs::copy_file(run.foreign_state, run.state, fs::copy_options::overwrite_existing);
  const std::string message = error_of([&] { train_quietly(run.cfg, run.dir, /*resume=*/true); });
  EXPECT_CONTAINS(message, "checkpoint '" + run.state + "' does not belong to '" + run.model +
                               "': it was saved with a model file whose data checksum is ");
  EXPECT_CONTAINS(message, "resume needs the model and state files of one save");
}

// F2. A state file of format 2 does not name its model file: it must at least have been saved with the model file's
// config, and a resume from it says that it was matched by config and step only.
TEST(RunIntegrity, StateFilesOfFormat2AreMatchedByConfig) {
  const InterruptedRun run = interrupted_run_and_another("f2_format2");
  const std::map<std::string, std::optional<std::string>> as_format_2 = {{"canonlab.format_version", "2"},
                                                                         {"canonlab.model_data_checksum", std::nullopt}};
  const std::string own = read_text(run.state);
  fs::copy_file(run.foreign_state, run.state, fs::copy_options::overwrite_existing);
  rewrite_checkpoint(run.state, as_format_2);
  EXPECT_CONTAINS(error_of([&] { train_quietly(run.cfg, run.dir, /*resume=*/true); }),
                  "checkpoint '" + run.state + "' does not belong to '" + run.model +
                      "': they were saved with different configs");

  write_text(run.state, own);
  rewrite_checkpoint(run.state, as_format_2);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(train_quietly(run.cfg, run.dir, /*resume=*/true));
  EXPECT_CONTAINS(testing::internal::GetCapturedStderr(),
                  "warning: checkpoint '" + run.state + "' is format version 2, which does not record the model file "
                  "it belongs to; it was matched to '" + run.model + "' by config and step only\n");
}

// F9. A format-2 (now 3) checkpoint did not have to carry the data checksum: a weight changed by hand, with the
// checksum entries removed and the header checksum redone, was evaluated without a word.
TEST(RunIntegrity, CheckpointWithoutItsDataChecksumIsRefused) {
  const std::string model = trained_model_file("f9");
  RawFile f = split_file(model);
  erase_entry(f.header, kChecksumAlgoKey);
  erase_entry(f.header, kChecksumKey);
  reseal(f.header);
  f.data[0] = char(f.data[0] ^ 1);  // the lowest mantissa bit of the first weight: still finite
  join_file(model, f);
  ASSERT_FALSE(read_safetensors(model).checksum_verified);
  ASSERT_TRUE(read_safetensors(model).header_checksum_verified);

  const CliResult r = run_cli("eval " + model);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: checkpoint '" + model + "' is corrupt: format version 3 requires the data "
                            "checksum canonlab.data_checksum, which is missing");
}

// F9. Format 1 (no header checksum) and files that do not say their format are still read, but never silently.
TEST(RunIntegrity, UnverifiableCheckpointsAreReadWithAWarning) {
  const std::string model = trained_model_file("f9_old");
  RawFile f = split_file(model);
  erase_entry(f.header, kHeaderChecksumKey);
  const size_t version = f.header.find("\"canonlab.format_version\":\"3\"");
  ASSERT_NE(version, std::string::npos) << f.header.substr(0, 400);
  f.header[version + 27] = '1';
  join_file(model, f);
  CliResult r = run_cli("eval " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "warning: checkpoint '" + model + "' is format version 1, whose header carries no "
                            "checksum: its config, step and tensor names and shapes cannot be verified (its data "
                            "checksum was)\n");

  erase_entry(f.header, "canonlab.format_version");
  erase_entry(f.header, kChecksumAlgoKey);
  erase_entry(f.header, kChecksumKey);
  join_file(model, f);
  r = run_cli("eval " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "warning: checkpoint '" + model + "' has no canonlab.format_version (not written by "
                            "canonlab?) and no data checksum and no header checksum: its contents cannot be verified\n");
}

// F10. A writer killed mid-checkpoint leaves <file>.tmp.<its pid>...; when a live process held that pid again at the
// next start (after a kill and a quick rerun), the file was kept forever. The reuse is simulated by giving the dead
// writer's file the pid of this (live) process: its start time in the name is still the dead writer's.
TEST(RunIntegrity, DeadWritersTempFileGoesEvenWhenItsPidLivesAgain) {
  const std::string dir = temp_dir("f10");
  const std::string path = dir + "/step_00000010.model.safetensors";
  // A live writer of this process: its temp file must stay.
  AtomicFileWriter live(dir + "/latest.json");
  live.write(std::as_bytes(std::span("{", 1)));
  const std::string live_owner = live.temp_path().substr(live.temp_path().rfind(".tmp.") + 5);

  std::string reused;  // the dead writer's temp file, renamed to carry this process's pid
  for (int attempt = 0; attempt < 100 && reused.empty(); attempt++) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      AtomicWriteOptions options;
      options.after_write = [](uint64_t) { ::raise(SIGKILL); };  // killed mid-write: no cleanup
      try {
        write_file_atomic(path, std::vector<std::byte>(1 << 16, std::byte{7}), options);
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer was not killed";
    const std::string prefix = path + ".tmp." + std::to_string(child);
    std::string left;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().string().starts_with(prefix)) left = e.path().string();
    ASSERT_FALSE(left.empty()) << "the killed writer left no temp file";
    const std::string owner = std::to_string(::getpid()) + left.substr(prefix.size());
    // A child forked within the clock tick this process started in has its start time: it names this process as
    // well as the writer, so try again a few ms later. (Names with a pid alone, as canonlab wrote them before, never
    // differ: this is the finding.)
    if (owner == live_owner && owner.find('.') != std::string::npos) {
      fs::remove(left);
      ::usleep(5000);
      continue;
    }
    reused = path + ".tmp." + owner;
    fs::rename(left, reused);
  }
  ASSERT_FALSE(reused.empty());
  EXPECT_EQ(remove_stale_temp_files(dir), 1);
  EXPECT_FALSE(fs::exists(reused)) << "the dead writer's temp file was kept";
  EXPECT_TRUE(fs::exists(live.temp_path())) << "the live writer's temp file was removed";
}
