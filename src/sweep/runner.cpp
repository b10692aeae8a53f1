#include "sweep/runner.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include "config/config.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/directory_lock.h"
#include "io/paths.h"
#include "sweep/manifest.h"
#include "sweep/overview.h"
#include "sweep/pack_attempt.h"
#include "sweep/tensorboard_hparams.h"
#include "train/run_directory.h"
#include "io/json_read.h"

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

// Subjects of the errors about the sweep directory: every path below it comes from --out and the run names.
const std::string kCannotRead = "sweep directory (--out): cannot read";
const std::string kCannotCreate = "sweep directory (--out): cannot create";

// Checks the directory's sweep.json against the grid, and with --force moves aside runs whose config changed
// (nothing is deleted). The caller writes the new sweep.json once every run directory has been checked.
void prepare_directory(const std::string& dir, const nlohmann::json& manifest, const std::vector<SweepRun>& runs,
                       bool force) {
  const fs::path manifest_path = fs::path(dir) / "sweep.json";
  if (path_exists(manifest_path, kCannotRead)) {
    auto before = parse_json_or_discarded(read_text(manifest_path));
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
      const fs::path superseded = unused_superseded_directory(fs::path(dir) / "superseded");
      for (const SweepRun& run : runs) {
        const fs::path run_dir = fs::path(dir) / "runs" / run.name;
        auto it = old_configs.find(run.name);
        if (!path_exists(run_dir, kCannotRead) ||
            (it != old_configs.end() && !config_difference(it->second, config_to_json(run.config))))
          continue;
        create_directories_at(superseded, kCannotCreate);
        rename_at(run_dir, superseded / run.name, "sweep directory (--out): cannot move the changed run");
      }
    }
  } else if (!directory_listing(fs::path(dir) / "runs", kCannotRead).empty() && !force) {
    throw Error("'" + dir + "' has runs/ but no sweep.json, so its runs cannot be matched to this grid; use another "
                "--out, or --force to adopt the run directories whose config.resolved.yaml equals this grid's config");
  }
}

// Whether a run directory's config.resolved.yaml is `config`: the same text, or, when it was written by an earlier
// canonlab, the same config once read back (keys added since then take their defaults; config_difference).
bool trained_this_config(const fs::path& resolved, const RunConfig& config) {
  const std::string text = read_text(resolved);
  if (text == config_to_yaml(config)) return true;
  try {
    return !config_difference(config_to_json(config_from_yaml_string(text)), config_to_json(config)).has_value();
  } catch (const Error&) {
    return false;  // it does not load with this canonlab: not this grid's run
  }
}

// A child process at work: one run (`canonlab train`) or a pack of them (`canonlab train-pack`).
struct ActiveRun {
  std::vector<size_t> indices;  // the runs it trains
  std::optional<RunAttempt> attempt;
  std::optional<PackAttempt> pack;
  int slots = 1;  // of the --jobs budget: the runs stepping at once
  ChildProcess& process() { return attempt ? attempt->process : pack->process; }
  std::chrono::steady_clock::time_point started() const { return attempt ? attempt->started : pack->started; }
  int start_step(size_t k) const { return attempt ? attempt->start_step : pack->start_steps[k]; }
};

}  // namespace

void prepare_sweep_directory(const std::string& dir, const SweepSpec& spec, const std::vector<SweepRun>& runs,
                             bool force) {
  const nlohmann::json manifest = make_sweep_manifest(spec, runs);
  prepare_directory(dir, manifest, runs, force);
  // Every run directory must belong to this grid before anything is written: a run counts only if it trained
  // this config (one made by hand with `canonlab train`, or left by a sweep whose sweep.json is gone).
  for (const SweepRun& run : runs) {
    const fs::path run_dir = fs::path(dir) / "runs" / run.name;
    if (path_exists(run_dir / "config.resolved.yaml", kCannotRead) &&
        !trained_this_config(run_dir / "config.resolved.yaml", run.config))
      throw Error("run directory '" + run_dir.string() + "' was trained with another config than this grid's run '" +
                  run.name + "'; move it away first");
  }
  const fs::path manifest_path = fs::path(dir) / "sweep.json";
  // Past the checks only the name, description and report defaults can differ, and those may change.
  const std::string manifest_text = manifest.dump(1) + "\n";
  if (read_text(manifest_path) != manifest_text) write_text_atomic(manifest_path.string(), manifest_text);
  write_tensorboard_hparams(dir, runs);
}

SweepOutcome run_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SweepOptions& options) {
  CANONLAB_CHECK(options.jobs >= 1, "--jobs must be at least 1, got " + std::to_string(options.jobs));
  const std::string& dir = options.out_dir;
  create_directories_at(fs::path(dir) / "runs", kCannotCreate);
  DirectoryLock lock(dir, ".sweep.lock", "canonlab sweep");
  prepare_sweep_directory(dir, spec, runs, options.force);

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
        mark_done_if_unmarked(run_dir.string());
        views[i].state = RunView::State::done;
        views[i].step = views[i].steps;
        outcome.skipped++;
        outcome.done++;
        break;
      case RunDiskState::resumable:
        views[i].step = checkpoint_step(run_dir.string());
        pending.push_back(i);
        break;
      case RunDiskState::fresh:
        pending.push_back(i);
        break;
    }
  }

  const int run_threads = runs.empty() ? 1 : runs.front().config.train.threads;
  const std::string threads = std::to_string(run_threads);
  // What each child process trains: one run, or a pack of compatible runs (--pack).
  std::deque<std::vector<size_t>> queue;
  if (options.pack == 0) {
    for (const size_t i : pending) queue.push_back({i});
  } else {
    const std::vector<size_t> waiting(pending.begin(), pending.end());
    std::vector<const SweepRun*> waiting_runs;
    for (const size_t i : waiting) waiting_runs.push_back(&runs[i]);
    const int size = options.pack > 0 ? options.pack : waiting.empty() ? 1 : auto_pack_size(runs[waiting.front()].config);
    for (const std::vector<size_t>& pack : group_into_packs(waiting_runs, size)) {
      queue.emplace_back();
      for (const size_t k : pack) queue.back().push_back(waiting[k]);
    }
  }
  Overview overview(spec.name, int(runs.size()), options.jobs, threads, options.live);
  BlockedStopSignals stop_signals;
  std::vector<ActiveRun> active;
  int busy_slots = 0;
  const auto sweep_start = Clock::now();
  auto run_dir_of = [&](size_t i) { return (fs::path(dir) / "runs" / runs[i].name).string(); };

  auto launch = [&](const std::vector<size_t>& indices) {
    ActiveRun job;
    job.indices = indices;
    if (options.pack == 0) {
      const size_t i = indices.front();
      job.attempt = start_run_attempt(run_dir_of(i), config_to_yaml(runs[i].config), views[i].steps, options.executable);
    } else {
      std::vector<std::string> dirs, yamls;
      std::vector<int> steps;
      for (const size_t i : indices) {
        dirs.push_back(run_dir_of(i));
        yamls.push_back(config_to_yaml(runs[i].config));
        steps.push_back(views[i].steps);
      }
      // Side by side only at one thread per run (train/pack.h); otherwise the pack steps its runs in turn.
      job.slots = run_threads == 1 ? std::min(int(indices.size()), options.jobs) : 1;
      job.pack = start_pack_attempt(dir, dirs, yamls, steps, options.executable, job.slots);
    }
    for (size_t k = 0; k < indices.size(); k++) {
      views[indices[k]].state = RunView::State::running;
      views[indices[k]].step = job.start_step(k);
    }
    busy_slots += job.slots;
    active.push_back(std::move(job));
  };

  auto record_end = [&](size_t i, const AttemptResult& result, const ChildExit& exit) {
    RunView& view = views[i];
    if (result.end == AttemptEnd::done) {
      view.state = RunView::State::done;
      view.step = view.steps;
      outcome.done++;
      overview.event("done    " + runs[i].name);
    } else {
      // Interrupted on its own (someone signalled the trainer): its checkpoint resumes on the next run of
      // the sweep, but this one cannot count it as finished.
      view.state = RunView::State::failed;
      const std::string error =
          result.end == AttemptEnd::interrupted ? result.error + "; run the sweep again to resume it" : result.error;
      outcome.failed++;
      outcome.failures.push_back(runs[i].name + ": " + error + " (" + exit.describe() + ")");
      overview.event("FAILED  " + runs[i].name + ": " + error);
    }
  };

  while (!queue.empty() || !active.empty()) {
    while (!queue.empty() && (active.empty() || busy_slots < options.jobs)) {
      launch(queue.front());
      queue.pop_front();
    }
    if (const int sig = stop_signals.wait(250)) {
      for (ActiveRun& a : active) {
        a.process().terminate();
        for (const size_t i : a.indices) {
          views[i].state = RunView::State::pending;
          write_status(run_dir_of(i), {{"state", "interrupted"}, {"signal", sig}});
        }
      }
      active.clear();
      outcome.interrupted = true;
      outcome.stop_signal = sig;
      overview.draw(views, Clock::now() - sweep_start);
      overview.message(std::string("stopped by ") + strsignal(sig) +
                       "; run the same command again to resume (finished runs are kept, the others continue from "
                       "their last checkpoint)");
      return outcome;
    }
    for (size_t k = 0; k < active.size();) {
      ActiveRun& a = active[k];
      const double seconds = std::chrono::duration<double>(Clock::now() - a.started()).count();
      for (size_t r = 0; r < a.indices.size(); r++) {
        RunView& view = views[a.indices[r]];
        if (auto step = latest_logged_step(run_dir_of(a.indices[r]))) view.step = std::max(view.step, *step);
        if (view.step > a.start_step(r)) view.seconds_per_step = seconds / double(view.step - a.start_step(r));
      }
      std::optional<ChildExit> exit = a.process().poll();
      if (!exit) {
        k++;
        continue;
      }
      if (a.attempt) {
        const size_t i = a.indices.front();
        record_end(i, finish_run_attempt(run_dir_of(i), views[i].steps, *exit, seconds), *exit);
      } else {
        std::vector<std::string> dirs;
        std::vector<int> steps;
        for (const size_t i : a.indices) {
          dirs.push_back(run_dir_of(i));
          steps.push_back(views[i].steps);
        }
        const std::vector<AttemptResult> results = finish_pack_attempt(*a.pack, dirs, steps, *exit, seconds);
        for (size_t r = 0; r < a.indices.size(); r++) record_end(a.indices[r], results[r], *exit);
      }
      busy_slots -= a.slots;
      active.erase(active.begin() + std::ptrdiff_t(k));
    }
    overview.draw(views, Clock::now() - sweep_start);
  }
  overview.draw(views, Clock::now() - sweep_start, /*final=*/true);
  return outcome;
}

}  // namespace canonlab
