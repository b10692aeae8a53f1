#include "sweep/slurm_worker.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/strict_number.h"
#include "sweep/child_process.h"
#include "sweep/pack_attempt.h"
#include "sweep/run_attempt.h"
#include "sweep/slurm_queue.h"
#include "train/stop_signals.h"

namespace canonlab {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The worker takes its stop signals synchronously (sigtimedwait), like the local runner: a signal is a value the
// loop looks at, not a handler racing with it. The trainer starts with an empty mask (ChildProcess); the short
// commands (scontrol) keep this one, so that the SIGTERM with which Slurm ends a requeued task cannot cut the
// requeue itself short.
class StopSignalWaiter {
 public:
  StopSignalWaiter() {
    sigemptyset(&set_);
    for (int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaddset(&set_, sig);
    ::sigprocmask(SIG_BLOCK, &set_, &previous_);
  }
  ~StopSignalWaiter() { ::sigprocmask(SIG_SETMASK, &previous_, nullptr); }
  StopSignalWaiter(const StopSignalWaiter&) = delete;
  StopSignalWaiter& operator=(const StopSignalWaiter&) = delete;

  int wait(int ms) const {  // the signal, or 0 after `ms`
    timespec timeout{ms / 1000, long(ms % 1000) * 1000000L};
    const int sig = ::sigtimedwait(&set_, nullptr, &timeout);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_, previous_;
};

// Whether process `pid` has a handler installed for `sig`: its SigCgt mask in /proc/PID/status.
bool catches(pid_t pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("SigCgt:")) continue;
    const std::string hex = line.substr(line.find_first_not_of(" \t", 7));
    unsigned long long mask = 0;
    for (char c : hex) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) break;
      mask = mask * 16 + unsigned(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
    }
    return (mask >> (sig - 1)) & 1ULL;
  }
  return false;
}

// Passes each stop signal the worker received on to the trainer once, and only while the trainer catches it.
// The trainer's handler resets itself on its first signal, and a second one of the kind kills it at once (no
// checkpoint). Under proctrack/pgid the trainer, in its own process group, hears nothing from Slurm; where Slurm
// signals every process of the job itself (proctrack/cgroup) the trainer has its SIGTERM already, its handler
// is gone when we look, and we leave it alone. The look waits kGrace after the worker's own signal so that
// Slurm's delivery to the trainer is over by then. A signal that arrives before training has installed its
// handlers (the run is still loading) is held back until they are there, so that a stop ends in a checkpoint.
class SignalForwarder {
 public:
  static constexpr auto kGrace = std::chrono::milliseconds(200);

  void request(int sig) { requested_.try_emplace(sig, Clock::now()); }
  bool requested(int sig) const { return requested_.count(sig) > 0; }

  void poll(pid_t child) {
    for (const auto& [sig, since] : requested_) {
      if (forwarded_.count(sig) || Clock::now() - since < kGrace || !catches(child, sig)) continue;
      ::kill(child, sig);
      ::kill(child, SIGCONT);  // a stopped trainer takes the signal only once it runs again
      forwarded_.insert(sig);
    }
  }

 private:
  std::map<int, Clock::time_point> requested_;
  std::set<int> forwarded_;
};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// "123_4" for this array task, from Slurm's environment; empty outside Slurm.
std::string slurm_task_id() {
  const std::string array_job = env("SLURM_ARRAY_JOB_ID"), task = env("SLURM_ARRAY_TASK_ID");
  if (!array_job.empty() && !task.empty()) return array_job + "_" + task;
  return env("SLURM_JOB_ID");
}

void say(const std::string& line) { std::cout << "canonlab sweep-task: " << line << std::endl; }

// The run.yaml of a run the task should train; nothing for one that is finished (marked done) or cannot be trained
// (no run.yaml: marked failed, and `failed` set).
std::optional<std::string> run_to_train(const std::string& run_dir, const SlurmTaskRun& run, bool& failed) {
  if (inspect_run_dir(run_dir, run.steps) == RunDiskState::finished) {
    mark_done_if_unmarked(run_dir);
    say(run.name + ": already finished");
    return std::nullopt;
  }
  std::optional<std::string> run_yaml = read_text_if_exists(fs::path(run_dir) / "run.yaml", "run config");
  if (!run_yaml) {
    failed = true;
    create_directories_at(run_dir, "cannot create run directory");
    write_status(run_dir, {{"state", "failed"}, {"error", "run.yaml is missing (the submission writes it)"}});
    say(run.name + ": FAILED: " + run_dir + "/run.yaml is missing");
  }
  return run_yaml;
}

// Waits for a trainer (a run's or a pack's) to end, passing on each stop signal the worker receives; the first one
// is kept in stop_signal. Returns its exit and the signal to count as forwarded (0: none).
std::pair<ChildExit, int> wait_passing_signals_on(ChildProcess& process, const std::string& name,
                                                  const StopSignalWaiter& signals, int& stop_signal) {
  SignalForwarder forwarder;
  std::optional<ChildExit> exit;
  while (!(exit = process.poll())) {
    if (const int sig = signals.wait(100)) {
      say(name + ": received " + strsignal(sig) + "; passing it on to the trainer");
      forwarder.request(sig);
      if (stop_signal == 0) stop_signal = sig;
    }
    forwarder.poll(process.pid());
  }
  return {*exit, forwarder.requested(exit->signal) ? exit->signal : 0};
}

// Says how a run's attempt ended; false when it failed.
bool report_end(const std::string& name, const std::string& run_dir, const AttemptResult& result, const ChildExit& exit) {
  switch (result.end) {
    case AttemptEnd::done: say(name + ": done"); return true;
    case AttemptEnd::interrupted:
      say(name + ": interrupted at checkpoint step " + std::to_string(checkpoint_step(run_dir)) + " (" + result.error + ")");
      return true;
    case AttemptEnd::failed: break;
  }
  say(name + ": FAILED: " + result.error + " (" + exit.describe() + ")");
  return false;
}

// A pack's task (SlurmSubmission::pack): its unfinished runs in one `canonlab train-pack` child, which steps them
// side by side on the task's CPUs, its stop signals passed on as to a single run's trainer. False when a run failed.
bool train_task_as_pack(const fs::path& sweep_dir, const std::vector<SlurmTaskRun>& runs, const nlohmann::json& extra,
                        const StopSignalWaiter& signals, int& stop_signal) {
  std::vector<std::string> dirs, yamls;
  std::vector<int> steps;
  bool failed = false;
  for (const SlurmTaskRun& run : runs) {
    const std::string run_dir = (sweep_dir / "runs" / run.name).string();
    if (std::optional<std::string> run_yaml = run_to_train(run_dir, run, failed)) {
      dirs.push_back(run_dir);
      yamls.push_back(std::move(*run_yaml));
      steps.push_back(run.steps);
    }
  }
  if (dirs.empty() || (stop_signal = signals.wait(0)) != 0) return !failed;
  PackAttempt attempt = start_pack_attempt(sweep_dir.string(), dirs, yamls, steps, "/proc/self/exe", /*width=*/0, extra,
                                           /*own_process_group=*/true);
  say(attempt.name + ": " + std::to_string(dirs.size()) + " run(s) side by side, output in " + attempt.log_path);
  const auto [exit, forwarded] = wait_passing_signals_on(attempt.process, attempt.name, signals, stop_signal);
  const double seconds = std::chrono::duration<double>(Clock::now() - attempt.started).count();
  const std::vector<AttemptResult> results = finish_pack_attempt(attempt, dirs, steps, exit, seconds, forwarded, extra);
  for (size_t i = 0; i < dirs.size(); i++)
    failed |= !report_end(fs::path(dirs[i]).filename().string(), dirs[i], results[i], exit);
  return !failed;
}

}  // namespace

int run_sweep_task(const std::string& submission_file, int task_index) {
  const SlurmSubmission submission = read_submission(submission_file);
  CANONLAB_CHECK(task_index >= 0 && size_t(task_index) < submission.tasks.size(),
                 "task " + std::to_string(task_index) + " is not in '" + submission_file + "', which has tasks 0-" +
                     std::to_string(submission.tasks.size() - 1));
  const fs::path sweep_dir(submission.sweep_dir);
  CANONLAB_CHECK(path_exists(sweep_dir / "sweep.json", "'" + submission_file + "': sweep_dir: cannot read"),
                 "'" + sweep_dir.string() + "' (named by '" + submission_file + "') is not a sweep directory: no sweep.json");
  const std::string task_id = slurm_task_id();
  const int restarts = parse_integer<int>(env("SLURM_RESTART_COUNT")).value_or(0);
  nlohmann::json extra = nlohmann::json::object();
  if (!task_id.empty()) extra = {{"launcher", "slurm"}, {"slurm_job", task_id}, {"slurm_restarts", restarts}};
  const std::vector<SlurmTaskRun>& runs = submission.tasks[size_t(task_index)];
  say("task " + (task_id.empty() ? std::to_string(task_index) : task_id) + ", restart " + std::to_string(restarts) + ", " +
      std::to_string(runs.size()) + " run(s) in " + sweep_dir.string());

  StopSignalWaiter signals;
  int stop_signal = 0;  // the first stop signal: no run starts after it
  bool failed = false;
  if (submission.pack) failed = !train_task_as_pack(sweep_dir, runs, extra, signals, stop_signal);
  for (const SlurmTaskRun& run : submission.pack ? std::vector<SlurmTaskRun>{} : runs) {
    if (stop_signal == 0) stop_signal = signals.wait(0);
    if (stop_signal != 0) break;
    const std::string run_dir = (sweep_dir / "runs" / run.name).string();
    const std::optional<std::string> run_yaml = run_to_train(run_dir, run, failed);
    if (!run_yaml) continue;
    // The running binary, even if a rebuild replaced the file since: both attempts of a run train with one code.
    RunAttempt attempt = start_run_attempt(run_dir, *run_yaml, run.steps, "/proc/self/exe", extra,
                                           /*own_process_group=*/true);
    say(run.name + ": " + (attempt.start_step > 0 ? "resuming from step " + std::to_string(attempt.start_step) : "starting"));
    const auto [exit, forwarded] = wait_passing_signals_on(attempt.process, run.name, signals, stop_signal);
    const double seconds = std::chrono::duration<double>(Clock::now() - attempt.started).count();
    failed |= !report_end(run.name, run_dir, finish_run_attempt(run_dir, run.steps, exit, seconds, forwarded, extra), exit);
  }

  const bool unfinished = std::ranges::any_of(runs, [&](const SlurmTaskRun& run) {
    return inspect_run_dir((sweep_dir / "runs" / run.name).string(), run.steps) != RunDiskState::finished;
  });
  if (stop_signal == SIGUSR1 && unfinished) {
    // The time-limit warning: this task goes back into the queue and continues from the checkpoints.
    if (task_id.empty()) {
      say("stopped by the time-limit warning, but not running under Slurm: nothing to requeue");
      return kExitStoppedBySignal;
    }
    const CommandResult r = run_command({"scontrol", "requeue", task_id});
    if (r.started && r.exit.ok()) {
      say("requeued " + task_id + " (restart " + std::to_string(restarts + 1) + " resumes from the checkpoints)");
      return 0;
    }
    say("could not requeue " + task_id + ": scontrol " + (r.started ? r.exit.describe() + ": " + r.errors : "cannot be run") +
        "; the runs are resumable, submit the sweep again");
    return kExitStoppedBySignal;
  }
  if (stop_signal != 0 && unfinished) {
    say(std::string("stopped by ") + strsignal(stop_signal) + "; the runs are resumable: submit the sweep again");
    return kExitStoppedBySignal;
  }
  return failed ? 1 : 0;
}

}  // namespace canonlab
