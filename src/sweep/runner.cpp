#include "sweep/runner.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "config/config.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/directory_lock.h"
#include "sweep/child_process.h"
#include "sweep/manifest.h"
#include "sweep/overview.h"
#include "train/checkpoint.h"

namespace canonlab {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The sweep waits for SIGINT/SIGTERM/SIGHUP synchronously (sigtimedwait) instead of in a handler, so stopping
// is ordinary control flow: children are terminated, their checkpoints stay, and a re-run resumes them.
class BlockedStopSignals {
 public:
  BlockedStopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);
    ::sigprocmask(SIG_BLOCK, &set_, &previous_);
  }
  ~BlockedStopSignals() { ::sigprocmask(SIG_SETMASK, &previous_, nullptr); }
  BlockedStopSignals(const BlockedStopSignals&) = delete;
  BlockedStopSignals& operator=(const BlockedStopSignals&) = delete;

  // Sleeps up to `ms`; the signal number if a stop signal arrived.
  int wait(int ms) const {
    timespec timeout{ms / 1000, long(ms % 1000) * 1000000L};
    const int sig = ::sigtimedwait(&set_, nullptr, &timeout);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_, previous_;
};

std::string read_text(const fs::path& path) { return read_text_if_exists(path.string()).value_or(""); }

// The last lines of a failed run's log, preferring the line that says "error:".
std::string failure_message(const fs::path& log_path) {
  const std::string text = read_text(log_path);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (auto cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);  // progress-bar redraws
    if (!line.empty()) lines.push_back(line);
    start = end + 1;
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (it->rfind("error:", 0) == 0) return *it;
  std::string tail;
  for (size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); i++) tail += (tail.empty() ? "" : " | ") + lines[i];
  return tail.empty() ? "(no output)" : tail;
}

// The step and elapsed seconds of the newest record in metrics.jsonl, read from its tail.
std::optional<int> latest_logged_step(const fs::path& metrics_path) {
  std::ifstream in(metrics_path, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(size_t(size - from), '\0');
  in.read(tail.data(), std::streamsize(tail.size()));
  std::optional<int> step;
  size_t start = 0;
  while (start < tail.size()) {
    size_t end = tail.find('\n', start);
    if (end == std::string::npos) break;  // a line still being written
    auto j = nlohmann::json::parse(tail.substr(start, end - start), nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) step = int(j["step"].get<int64_t>());
    start = end + 1;
  }
  return step;
}

// The step of a run's latest checkpoint; 0 when there is none or it is unreadable (training reports that).
int checkpoint_step(const fs::path& run_dir) {
  try {
    const std::optional<LatestCheckpoint> latest = read_latest_checkpoint((run_dir / "checkpoints").string());
    return latest ? latest->step : 0;
  } catch (const Error&) {
    return 0;
  }
}

void write_status(const fs::path& run_dir, nlohmann::json status) {
  status["time"] = std::time(nullptr);
  write_text_atomic((run_dir / "status.json").string(), status.dump(2) + "\n");
}

// Checks the directory's sweep.json against the grid, and with --force moves aside runs whose config changed
// (nothing is deleted). The caller writes the new sweep.json once every run directory has been checked.
void prepare_directory(const std::string& dir, const nlohmann::json& manifest, const std::vector<SweepRun>& runs,
                       bool force) {
  const fs::path manifest_path = fs::path(dir) / "sweep.json";
  if (fs::exists(manifest_path)) {
    auto before = nlohmann::json::parse(read_text(manifest_path), nullptr, false);
    std::optional<std::string> diff =
        before.is_discarded() ? std::optional<std::string>("sweep.json is not valid JSON") : sweep_difference(before, manifest);
    if (diff && !force)
      throw Error("'" + dir + "' holds a different sweep: " + *diff +
                  ". Use another --out, or --force to keep the runs that did not change and redo the others "
                  "(changed runs are moved to " + dir + "/superseded/)");
    if (diff && !before.is_discarded()) {
      std::map<std::string, nlohmann::json> old_configs;
      if (before.contains("runs") && before["runs"].is_array())
        for (const auto& r : before["runs"])
          if (r.is_object() && r.contains("name") && r["name"].is_string() && r.contains("config"))
            old_configs[r["name"].get<std::string>()] = r["config"];
      fs::path superseded = fs::path(dir) / "superseded" / std::to_string(std::time(nullptr));
      for (int n = 1; fs::exists(superseded); n++)  // two --force runs within one second
        superseded = fs::path(dir) / "superseded" / (std::to_string(std::time(nullptr)) + "-" + std::to_string(n));
      for (const SweepRun& run : runs) {
        const fs::path run_dir = fs::path(dir) / "runs" / run.name;
        auto it = old_configs.find(run.name);
        if (!fs::exists(run_dir) || (it != old_configs.end() && it->second == config_to_json(run.config))) continue;
        fs::create_directories(superseded);
        fs::rename(run_dir, superseded / run.name);
      }
    }
  } else if (fs::exists(fs::path(dir) / "runs") && !fs::is_empty(fs::path(dir) / "runs") && !force) {
    throw Error("'" + dir + "' has runs/ but no sweep.json, so its runs cannot be matched to this grid; use another "
                "--out, or --force to adopt the run directories whose config.resolved.yaml equals this grid's config");
  }
}

struct ActiveRun {
  size_t index;
  ChildProcess process;
  Clock::time_point started;
  int start_step;
};

}  // namespace

RunDiskState inspect_run_dir(const std::string& run_dir, int steps) {
  const fs::path dir(run_dir);
  auto summary = nlohmann::json::parse(read_text(dir / "summary.json"), nullptr, false);
  if (summary.is_object() && summary.contains("steps") && summary["steps"].is_number_integer() &&
      summary["steps"].get<int64_t>() == steps)
    return RunDiskState::finished;
  if (fs::exists(dir / "checkpoints" / "latest.json")) return RunDiskState::resumable;
  return RunDiskState::fresh;
}

SweepOutcome run_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SweepOptions& options) {
  CANONLAB_CHECK(options.jobs >= 1, "--jobs must be at least 1, got " + std::to_string(options.jobs));
  const std::string& dir = options.out_dir;
  fs::create_directories(fs::path(dir) / "runs");
  DirectoryLock lock(dir, ".sweep.lock", "canonlab sweep");
  const nlohmann::json manifest = make_sweep_manifest(spec, runs);
  prepare_directory(dir, manifest, runs, options.force);
  // Every run directory must belong to this grid before anything is written: a run counts only if it trained
  // this config (one made by hand with `canonlab train`, or left by a sweep whose sweep.json is gone).
  for (const SweepRun& run : runs) {
    const fs::path run_dir = fs::path(dir) / "runs" / run.name;
    if (fs::exists(run_dir / "config.resolved.yaml") &&
        read_text(run_dir / "config.resolved.yaml") != config_to_yaml(run.config))
      throw Error("run directory '" + run_dir.string() + "' was trained with another config than this grid's run '" +
                  run.name + "'; move it away first");
  }
  const fs::path manifest_path = fs::path(dir) / "sweep.json";
  // Past the checks only the name, description and report defaults can differ, and those may change.
  const std::string manifest_text = manifest.dump(1) + "\n";
  if (read_text(manifest_path) != manifest_text) write_text_atomic(manifest_path.string(), manifest_text);

  SweepOutcome outcome;
  outcome.total = int(runs.size());
  std::vector<RunView> views(runs.size());
  std::deque<size_t> pending;
  for (size_t i = 0; i < runs.size(); i++) {
    const fs::path run_dir = fs::path(dir) / "runs" / runs[i].name;
    views[i].name = runs[i].name;
    views[i].steps = runs[i].config.train.steps;
    switch (inspect_run_dir(run_dir.string(), views[i].steps)) {
      case RunDiskState::finished:
        // The sweep may have been killed between a run's summary and its status line.
        if (read_text(run_dir / "status.json").find("\"done\"") == std::string::npos)
          write_status(run_dir, {{"state", "done"}, {"exit_code", 0}});
        views[i].state = RunView::State::done;
        views[i].step = views[i].steps;
        outcome.skipped++;
        outcome.done++;
        break;
      case RunDiskState::resumable:
        views[i].step = checkpoint_step(run_dir);
        pending.push_back(i);
        break;
      case RunDiskState::fresh:
        pending.push_back(i);
        break;
    }
  }

  const std::string threads = std::to_string(runs.empty() ? 1 : runs.front().config.train.threads);
  Overview overview(spec.name, int(runs.size()), options.jobs, threads, options.live);
  BlockedStopSignals stop_signals;
  std::vector<ActiveRun> active;
  const auto sweep_start = Clock::now();

  auto launch = [&](size_t i) {
    const fs::path run_dir = fs::path(dir) / "runs" / runs[i].name;
    fs::create_directories(run_dir);
    const std::string config_path = (run_dir / "run.yaml").string();
    write_text_atomic(config_path, config_to_yaml(runs[i].config));
    const bool resume = inspect_run_dir(run_dir.string(), views[i].steps) == RunDiskState::resumable;
    std::vector<std::string> args = {"train", config_path, "--out", run_dir.string(), "--quiet"};
    if (resume) args.push_back("--resume");
    write_status(run_dir, {{"state", "running"}, {"resumed_from_step", resume ? checkpoint_step(run_dir) : 0}});
    active.push_back({i, ChildProcess(options.executable, args, (run_dir / "train.log").string()), Clock::now(),
                      resume ? checkpoint_step(run_dir) : 0});
    views[i].state = RunView::State::running;
    views[i].step = active.back().start_step;
  };

  while (!pending.empty() || !active.empty()) {
    while (!pending.empty() && int(active.size()) < options.jobs) {
      launch(pending.front());
      pending.pop_front();
    }
    if (const int sig = stop_signals.wait(250)) {
      for (ActiveRun& a : active) {
        a.process.terminate();
        views[a.index].state = RunView::State::pending;
        write_status(fs::path(dir) / "runs" / runs[a.index].name, {{"state", "interrupted"}, {"signal", sig}});
      }
      active.clear();
      outcome.interrupted = true;
      overview.draw(views, Clock::now() - sweep_start);
      overview.message(std::string("stopped by ") + strsignal(sig) +
                       "; run the same command again to resume (finished runs are kept, the others continue from "
                       "their last checkpoint)");
      return outcome;
    }
    for (size_t k = 0; k < active.size();) {
      ActiveRun& a = active[k];
      const fs::path run_dir = fs::path(dir) / "runs" / runs[a.index].name;
      RunView& view = views[a.index];
      if (auto step = latest_logged_step(run_dir / "metrics.jsonl")) view.step = std::max(view.step, *step);
      const double seconds = std::chrono::duration<double>(Clock::now() - a.started).count();
      if (view.step > a.start_step) view.seconds_per_step = seconds / double(view.step - a.start_step);
      std::optional<ChildExit> exit = a.process.poll();
      if (!exit) {
        k++;
        continue;
      }
      const bool finished = exit->ok() && inspect_run_dir(run_dir.string(), view.steps) == RunDiskState::finished;
      if (finished) {
        view.state = RunView::State::done;
        view.step = view.steps;
        outcome.done++;
        write_status(run_dir, {{"state", "done"}, {"exit_code", 0}, {"wall_s", seconds}});
        overview.event("done    " + runs[a.index].name);
      } else {
        view.state = RunView::State::failed;
        const std::string error = exit->ok() ? "exited without writing summary.json" : failure_message(run_dir / "train.log");
        outcome.failed++;
        outcome.failures.push_back(runs[a.index].name + ": " + error + " (" + exit->describe() + ")");
        write_status(run_dir, {{"state", "failed"}, {"exit_code", exit->exit_code}, {"signal", exit->signal},
                               {"error", error}, {"wall_s", seconds}});
        overview.event("FAILED  " + runs[a.index].name + ": " + error);
      }
      active.erase(active.begin() + std::ptrdiff_t(k));
    }
    overview.draw(views, Clock::now() - sweep_start);
  }
  overview.draw(views, Clock::now() - sweep_start, /*final=*/true);
  return outcome;
}

}  // namespace canonlab
