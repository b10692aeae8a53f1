// canonlab train-pack RUN_DIR... [--width W] [--report FILE]   (internal: one pack of `canonlab sweep --pack`)
// Trains the runs whose directories hold a run.yaml side by side in this process (train/pack.h), each as
// `canonlab train RUN_DIR/run.yaml --out RUN_DIR` would: resumed from its checkpoint when it has one, afresh with
// its earlier results moved aside when it has results but no checkpoint, and kept as it is when it already finished
// (its summary.json holds train.steps), as the sweep keeps it. A run's error is appended to its
// RUN_DIR/train.log as an "error:" line, where the sweep reads a failed run's reason. --report writes, atomically,
// how each run ended: [{"run_dir", "end": done|failed|interrupted, "error", "steps_done", "kept"}].
// Exit status: 0 when every run finished, kExitStoppedBySignal when a stop signal ended the pack (every run stopped
// with a checkpoint, or finished), 1 when a run failed. CANONLAB_PAUSE_AT (train/phases.h) pauses the process the
// first time any of its runs reaches the phase, for tests.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "config/config.h"
#include "engine/error.h"
#include "engine/threads.h"
#include "io/atomic_file.h"
#include "sweep/run_attempt.h"
#include "train/pack.h"
#include "train/resource_estimate.h"
#include "train/run_directory.h"

namespace canonlab::cli {

namespace {

struct TrainPackArgs {
  std::vector<std::string> run_dirs;
  int width = 1;
  std::string report;
};

const char* end_name(PackRunEnd end) {
  switch (end) {
    case PackRunEnd::done: return "done";
    case PackRunEnd::interrupted: return "interrupted";
    case PackRunEnd::failed: break;
  }
  return "failed";
}

// A member's config and its resource check, or the failed result that takes its place: a run whose run.yaml does not
// load or that this machine cannot hold fails alone, as an error during its training would.
std::optional<PackRunResult> prepare_member(PackMember& m, double& peak_bytes, const std::string& dir,
                                            const PhaseHook& pause_at) {
  try {
    m.config = load_config(dir + "/run.yaml", {});
    m.options.out_dir = dir;
    const RunDiskState state = inspect_run_dir(dir, m.config.train.steps);
    if (state == RunDiskState::finished) {
      // As the sweep does: a run whose summary.json holds its steps is kept, not trained again and moved aside.
      PackRunResult done;
      done.end = PackRunEnd::done;
      done.steps_done = m.config.train.steps;
      done.kept = true;
      return done;
    }
    m.options.resume = state == RunDiskState::resumable;
    m.options.force = !m.options.resume && !earlier_run_results(dir).empty();
    m.options.progress = false;
    m.options.at_phase = pause_at;
    const ResourceEstimate estimate = estimate_resources(m.config, m.options.resume ? Purpose::resume : Purpose::train);
    check_resources(estimate, m.config);
    peak_bytes += estimate.peak_bytes;
    return std::nullopt;
  } catch (const std::exception& e) {
    PackRunResult failed;
    failed.error = e.what();
    return failed;
  }
}

int run_train_pack(const TrainPackArgs& a) {
  const StopSignals stop_signals;
  const PhaseHook pause_at = pause_hook_from_environment(/*once=*/true);
  std::vector<PackMember> members;
  std::vector<std::optional<PackRunResult>> prepared;  // per run dir: nullopt = a member, else its failure
  double peak_bytes = 0;
  for (const std::string& dir : a.run_dirs) {
    PackMember m;
    prepared.push_back(prepare_member(m, peak_bytes, dir, pause_at));
    if (!prepared.back()) members.push_back(std::move(m));
  }
  const double available = available_memory_bytes();
  std::vector<PackRunResult> trained;
  if (available > 0 && peak_bytes > available) {
    PackRunResult too_big;
    too_big.error = "train-pack: the pack's " + std::to_string(members.size()) + " runs need about " +
                    std::to_string(int(peak_bytes / (1 << 20))) + " MiB together, more than the " +
                    std::to_string(int(available / (1 << 20))) + " MiB available; use a smaller --pack";
    trained.assign(members.size(), too_big);
  } else if (!members.empty()) {
    const int width = a.width > 0 ? a.width : pack_width(members, usable_cpu_count());
    trained = train_pack(std::move(members), stop_signals, width);
  }
  std::vector<PackRunResult> results;
  size_t next_trained = 0;
  for (std::optional<PackRunResult>& p : prepared) results.push_back(p ? std::move(*p) : trained[next_trained++]);

  nlohmann::json report = nlohmann::json::array();
  bool failed = false, interrupted = false;
  for (size_t i = 0; i < results.size(); i++) {
    const PackRunResult& r = results[i];
    const std::string& dir = a.run_dirs[i];
    report.push_back({{"run_dir", dir}, {"end", end_name(r.end)}, {"error", r.error}, {"steps_done", r.steps_done},
                      {"kept", r.kept}});
    failed |= r.end == PackRunEnd::failed;
    interrupted |= r.end == PackRunEnd::interrupted;
    std::fprintf(stderr, "%s %s%s%s%s\n", end_name(r.end), dir.c_str(), r.kept ? " (already finished: kept, not trained again)" : "",
                 r.error.empty() ? "" : ": ", r.error.c_str());
    if (r.end == PackRunEnd::failed) {
      std::ofstream log(dir + "/train.log", std::ios::app);
      log << "error: " << r.error << "\n";
    }
  }
  if (!a.report.empty()) write_text_atomic(a.report, report.dump(1) + "\n");
  return failed ? 1 : interrupted ? kExitStoppedBySignal : 0;
}

}  // namespace

Command add_train_pack_command(CLI::App& app) {
  auto a = std::make_shared<TrainPackArgs>();
  CLI::App* sub = app.add_subcommand("train-pack", "Internal: train a pack of runs side by side (canonlab sweep --pack)");
  sub->group("");  // not listed in --help: `canonlab sweep --pack` runs it
  sub->add_option("run_dirs", a->run_dirs, "Run directories, each with its run.yaml")->required();
  sub->add_option("--width", a->width, "Runs stepping at once (each then at train.threads 1); 0: as many as the "
                                       "CPUs this process may use allow")->check(CLI::NonNegativeNumber);
  sub->add_option("--report", a->report, "Where to write how each run ended (JSON)");
  return {sub, [a] { return run_train_pack(*a); }};
}

}  // namespace canonlab::cli
