// Stop signals at every phase of a run (train/phases.h). SIGUSR1 (Slurm's time-limit warning), SIGTERM (scancel)
// and SIGINT (Ctrl-C) are caught from the trainer's start to its exit: up to and during the last step they stop the
// run after the step in progress with a checkpoint (exit 75) from which a resume ends with the bits of an
// uninterrupted run; after the last step they let it finish (exit 0) and are reported. No test here races the
// clock: each acts on a run paused at a named phase (in-process through TrainOptions::at_phase, in a process through
// CANONLAB_PAUSE_AT, which makes it stop itself with SIGSTOP).
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "config/config.h"
#include "io/safetensors.h"
#include "process_support.h"
#include "run_records.h"
#include "train/trainer.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using test_support::metrics_records;
using test_support::spawn_canonlab;
using test_support::wait_exit_code;
using test_support::wait_until_stopped;

constexpr int kSteps = 6;
const std::string kDemo = std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml";

RunConfig tiny_config(int steps = kSteps) {
  return load_config(kDemo, {"train.steps=" + std::to_string(steps), "train.batch_size=8", "train.threads=1",
                             "model.d_model=32", "model.n_layers=2", "train.log_every=1", "train.eval_every=0",
                             "train.checkpoint_every=0", "probe.n_sequences=8"});
}

std::vector<std::string> tiny_sets(int steps) {
  return {"--set", "train.steps=" + std::to_string(steps), "--set", "train.batch_size=8", "--set", "train.threads=1",
          "--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "train.log_every=1",
          "--set", "train.eval_every=0", "--set", "train.checkpoint_every=0", "--set", "probe.n_sequences=8",
          "--quiet"};
}

fs::path fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("canonlab_stop_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int latest_checkpoint_step(const fs::path& dir) {
  const nlohmann::json latest = nlohmann::json::parse(read_text(dir / "checkpoints/latest.json"), nullptr, false);
  return latest.is_discarded() ? -1 : latest.value("step", -1);
}

// Every tensor of the final model file, by name, as raw bytes.
std::map<std::string, std::vector<std::byte>> final_model(const fs::path& dir, int steps = kSteps) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoints/step_%08d.model.safetensors", steps);
  std::map<std::string, std::vector<std::byte>> out;
  for (const TensorEntry& t : read_safetensors((dir / name).string()).tensors) out[t.name] = t.data;
  return out;
}

TrainOptions quiet_options(const fs::path& dir) {
  TrainOptions o;
  o.out_dir = dir.string();
  o.progress = false;
  return o;
}

// The uninterrupted run every stopped-and-resumed one must equal, trained once and removed at exit.
const fs::path& uninterrupted_run() {
  struct Run {
    fs::path dir = fresh_dir("uninterrupted");
    Run() { train(tiny_config(), quiet_options(dir)); }
    ~Run() { fs::remove_all(dir); }
  };
  static const Run run;
  return run.dir;
}

// ---------------------------------------------------------------------------------------------------------------
// In-process: the signal is raised at one phase of the run.

struct PhaseCase {
  std::string phase;  // train/phases.h
  int step;           // for after-step: the step after which the signal comes
  int signal;
  int stopped_at;     // the checkpoint step of the stop; 0 = the run finishes
};

std::ostream& operator<<(std::ostream& os, const PhaseCase& c) {
  return os << c.phase << (c.phase == "after-step" ? ":" + std::to_string(c.step) : "") << " " << sigabbrev_np(c.signal);
}

class StopSignalAtPhase : public ::testing::TestWithParam<PhaseCase> {};

TEST_P(StopSignalAtPhase, StopsWithACheckpointUpToTheLastStepAndLetsTheRunFinishAfterIt) {
  const PhaseCase c = GetParam();
  const fs::path dir = fresh_dir("phase");
  TrainOptions options = quiet_options(dir);
  bool raised = false;
  options.at_phase = [&](std::string_view phase, int steps_done) {
    if (raised || phase != c.phase || (c.phase == "after-step" && steps_done != c.step)) return;
    raised = true;
    ::raise(c.signal);  // a handler that was not installed lets the signal kill the test binary: a failure
  };
  // A run that finishes is watched through a guard of the caller's, which tells afterwards that a signal came; a
  // run that stops uses the one train() installs itself.
  std::optional<StopSignals> caller_guard;
  if (c.stopped_at == 0) {
    caller_guard.emplace();
    options.stop_signals = &*caller_guard;
  }
  const RunConfig cfg = tiny_config();
  try {
    train(cfg, options);
    EXPECT_TRUE(raised) << "the phase was never reached";
    EXPECT_EQ(c.stopped_at, 0) << "the run finished instead of stopping at step " << c.stopped_at;
    if (caller_guard) {
      EXPECT_EQ(caller_guard->received(), c.signal);
    }
    EXPECT_TRUE(fs::exists(dir / "summary.json"));
  } catch (const StoppedBySignal& stop) {
    EXPECT_TRUE(raised);
    ASSERT_NE(c.stopped_at, 0) << "a signal after the last step stopped the run at step " << stop.step;
    EXPECT_EQ(stop.signal, c.signal);
    EXPECT_EQ(stop.step, c.stopped_at);
    EXPECT_EQ(latest_checkpoint_step(dir), c.stopped_at);
    EXPECT_FALSE(fs::exists(dir / "summary.json")) << "a stopped run has no summary";
    TrainOptions resume = quiet_options(dir);
    resume.resume = true;
    train(cfg, resume);
  }
  EXPECT_EQ(metrics_records(dir), metrics_records(uninterrupted_run()));
  EXPECT_EQ(final_model(dir), final_model(uninterrupted_run()));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(EveryPhase, StopSignalAtPhase,
                         ::testing::Values(PhaseCase{"start", 0, SIGINT, 1},
                                           PhaseCase{"before-first-step", 0, SIGTERM, 1},
                                           PhaseCase{"after-step", 3, SIGUSR1, 4},
                                           PhaseCase{"after-step", kSteps - 1, SIGUSR1, kSteps},  // during the last
                                           PhaseCase{"after-step", kSteps, SIGTERM, 0},
                                           PhaseCase{"final-eval", kSteps, SIGUSR1, 0},
                                           PhaseCase{"probe", kSteps, SIGINT, 0},
                                           PhaseCase{"summary", kSteps, SIGUSR1, 0}));

TEST(StopSignals, TheGuardCatchesUntilItIsDestroyedAndThenRestoresTheOldDisposition) {
  struct sigaction before{};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    const StopSignals guard;
    EXPECT_EQ(guard.received(), 0);
    ::raise(SIGTERM);
    EXPECT_EQ(guard.received(), SIGTERM);
    ::raise(SIGUSR1);
    EXPECT_EQ(guard.received(), SIGTERM) << "the first signal is the one reported";
  }
  struct sigaction after{};
  ::sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

// ---------------------------------------------------------------------------------------------------------------
// The CLI, paused at a phase by CANONLAB_PAUSE_AT; the signal goes in while the process is stopped.

struct CliRun {
  int exit_code = -1;
  std::string log;
};

// Trains into dir, pauses at `pause_at`, sends `sig` there, lets the process go on and waits for its end.
CliRun train_signalled_at(const fs::path& dir, int steps, const std::string& pause_at, int sig) {
  std::vector<std::string> args = {"train", kDemo, "--out", dir.string()};
  const std::vector<std::string> sets = tiny_sets(steps);
  args.insert(args.end(), sets.begin(), sets.end());
  const fs::path log = dir.string() + ".log";
  const pid_t pid = spawn_canonlab(args, log, {"CANONLAB_PAUSE_AT=" + pause_at});
  CliRun r;
  if (pid <= 0) return r;
  if (wait_until_stopped(pid, &r.exit_code)) {
    ::kill(pid, sig);
    ::kill(pid, SIGCONT);
    r.exit_code = wait_exit_code(pid);
  } else {
    r.log = "(the process ended without pausing at " + pause_at + ")\n";
  }
  r.log += read_text(log);
  fs::remove(log);
  return r;
}

CliRun train_cli(const fs::path& dir, int steps, bool resume) {
  std::vector<std::string> args = {"train", kDemo, "--out", dir.string()};
  const std::vector<std::string> sets = tiny_sets(steps);
  args.insert(args.end(), sets.begin(), sets.end());
  if (resume) args.push_back("--resume");
  const fs::path log = dir.string() + ".log";
  CliRun r;
  const pid_t pid = spawn_canonlab(args, log);
  r.exit_code = pid > 0 ? wait_exit_code(pid) : -1;
  r.log = read_text(log);
  fs::remove(log);
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(StopSignals, MidRunTheCliCheckpointsAfterTheStepInProgressExits75AndTheResumeIsBitExact) {
  constexpr int steps = 40;
  const fs::path stopped = fresh_dir("cli_stopped"), clean = fresh_dir("cli_clean");
  const CliRun run = train_signalled_at(stopped, steps, "after-step:20", SIGUSR1);
  ASSERT_EQ(run.exit_code, kExitStoppedBySignal) << run.log;
  EXPECT_TRUE(contains(run.log, "stopped by SIGUSR1: checkpoint at step 21")) << run.log;
  EXPECT_FALSE(fs::exists(stopped / "summary.json")) << "the run stopped before its end";
  EXPECT_EQ(latest_checkpoint_step(stopped), 21);

  const CliRun resumed = train_cli(stopped, steps, /*resume=*/true);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.log;
  EXPECT_TRUE(contains(resumed.log, "resuming from step 21")) << resumed.log;
  const CliRun uninterrupted = train_cli(clean, steps, /*resume=*/false);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.log;
  EXPECT_EQ(metrics_records(stopped), metrics_records(clean));
  EXPECT_EQ(final_model(stopped, steps), final_model(clean, steps));
  for (const fs::path& d : {stopped, clean}) fs::remove_all(d);
}

TEST(StopSignals, AtTheCliStartASignalStopsTheRunAfterItsFirstStep) {
  const fs::path dir = fresh_dir("cli_start");
  const CliRun run = train_signalled_at(dir, kSteps, "start", SIGTERM);
  ASSERT_EQ(run.exit_code, kExitStoppedBySignal) << run.log;
  EXPECT_TRUE(contains(run.log, "stopped by SIGTERM: checkpoint at step 1")) << run.log;
  fs::remove_all(dir);
}

TEST(StopSignals, AfterTheLastStepTheCliFinishesTheRunExits0AndSaysTheSignalCame) {
  for (const auto& [phase, sig] : std::vector<std::pair<std::string, int>>{
           {"after-step:" + std::to_string(kSteps), SIGUSR1}, {"final-eval", SIGTERM}, {"probe", SIGINT},
           {"summary", SIGUSR1}, {"returned", SIGTERM}}) {
    SCOPED_TRACE(phase);
    const fs::path dir = fresh_dir("cli_after");
    const CliRun run = train_signalled_at(dir, kSteps, phase, sig);
    EXPECT_EQ(run.exit_code, 0) << run.log;
    EXPECT_TRUE(contains(run.log, std::string("SIG") + sigabbrev_np(sig) + " arrived after the last step: the run "
                                  "finished")) << run.log;
    EXPECT_TRUE(fs::exists(dir / "summary.json"));
    EXPECT_EQ(final_model(dir), final_model(uninterrupted_run()));
    fs::remove_all(dir);
  }
}

TEST(StopSignals, AnUnknownPausePhaseIsRefusedNamingTheAllowedOnes) {
  for (const std::string value : {"later", "after-step:0", "after-step:x", "after-step:"}) {
    SCOPED_TRACE(value);
    const fs::path dir = fresh_dir("cli_pause_value");
    std::vector<std::string> args = {"train", kDemo, "--out", dir.string()};
    const fs::path log = dir.string() + ".log";
    const pid_t pid = spawn_canonlab(args, log, {"CANONLAB_PAUSE_AT=" + value});
    ASSERT_GT(pid, 0);
    EXPECT_EQ(wait_exit_code(pid), 2);
    const std::string text = read_text(log);
    EXPECT_TRUE(contains(text, "CANONLAB_PAUSE_AT: '" + value + "'")) << text;
    EXPECT_TRUE(contains(text, "allowed: start, before-first-step, after-step:N")) << text;
    EXPECT_FALSE(fs::exists(dir)) << "nothing is written before the environment is checked";
    fs::remove(log);
  }
}

}  // namespace
}  // namespace canonlab
