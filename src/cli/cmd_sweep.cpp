// canonlab sweep SWEEP.yaml [--jobs N] [--threads-per-run T] [--out DIR] [--force] [--dry-run]
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "engine/error.h"
#include "sweep/overview.h"
#include "sweep/runner.h"
#include "sweep/sweep_spec.h"

namespace fs = std::filesystem;

namespace canonlab::cli {

namespace {

struct SweepArgs {
  std::string sweep_path, out;
  int jobs = 0, threads_per_run = 1;
  bool force = false, dry_run = false;
};

int run_sweep_command(const SweepArgs& a) {
  const SweepSpec spec = load_sweep_spec(a.sweep_path);
  CANONLAB_CHECK(a.threads_per_run >= 1, "--threads-per-run must be at least 1, got " + std::to_string(a.threads_per_run));
  const std::vector<SweepRun> runs = expand_sweep(spec, a.threads_per_run);
  SweepOptions options;
  options.out_dir = a.out.empty() ? "runs/sweeps/" + spec.name : a.out;
  // Default budget: one run per core, each single-threaded (results then do not depend on --jobs).
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  options.jobs = a.jobs > 0 ? a.jobs : std::max(1, cores / a.threads_per_run);
  options.force = a.force;
  options.live = isatty(STDERR_FILENO);
  // The running binary itself, even if a rebuild replaces the file on disk meanwhile: every run of one
  // sweep invocation trains with the same code.
  options.executable = "/proc/self/exe";
  if (a.dry_run) {
    for (const SweepRun& run : runs) std::cout << options.out_dir << "/runs/" << run.name << "\n";
    std::cout << runs.size() << " runs, " << options.jobs << " at a time, " << a.threads_per_run << " thread(s) each\n";
    return 0;
  }
  const SweepOutcome outcome = run_sweep(spec, runs, options);
  if (outcome.interrupted) return 130;
  std::cout << outcome.done << "/" << outcome.total << " runs finished (" << outcome.skipped
            << " already were), " << outcome.failed << " failed; results in " << options.out_dir << "\n";
  for (const auto& f : outcome.failures) std::cout << "  failed: " << f << "\n";
  if (outcome.failed > 0) {
    std::cout << "fix the cause and run the same command again: finished runs are kept, failed ones start again "
                 "(from their last checkpoint, if they wrote one)\n";
    return 1;
  }
  std::cout << "next: canonlab report " << options.out_dir << "\n";
  return 0;
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* sub = app.add_subcommand("sweep", "Train every run of a sweep file's grid, in parallel; re-run to resume");
  sub->add_option("sweep", a->sweep_path, "Sweep YAML file (base config, set:, axes:)")->required()->check(CLI::ExistingFile);
  sub->add_option("--jobs,-j", a->jobs, "Runs at a time (default: cores / threads-per-run)");
  sub->add_option("--threads-per-run", a->threads_per_run, "Threads of each run (train.threads; default 1)");
  sub->add_option("--out", a->out, "Sweep directory (default runs/sweeps/<sweep name>)");
  sub->add_flag("--force", a->force, "Accept a changed grid: unchanged runs are kept, changed ones are redone "
                                      "(their old directories move to DIR/superseded/)");
  sub->add_flag("--dry-run", a->dry_run, "List the runs and exit");
  return {sub, [a] { return run_sweep_command(*a); }};
}

}  // namespace canonlab::cli
