// canonlab sweep SWEEP.yaml [--jobs N] [--threads-per-run T] [--pack N|auto] [--out DIR] [--force] [--dry-run]
//                           [--launcher slurm [--runs-per-task K] [--partition P] [--time T] ...]
// canonlab sweep --status DIR
// canonlab sweep-task SUBMISSION.json TASK     (internal: one Slurm array task; the sbatch script runs it)
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "engine/error.h"
#include "io/json_read.h"
#include "io/paths.h"
#include "io/strict_number.h"
#include "sweep/overview.h"
#include "sweep/pack_attempt.h"
#include "sweep/runner.h"
#include "sweep/slurm_launcher.h"
#include "sweep/slurm_queue.h"
#include "sweep/slurm_worker.h"
#include "sweep/sweep_spec.h"
#include "sweep/sweep_status.h"

namespace fs = std::filesystem;

namespace canonlab::cli {

namespace {

// The slurm: keys that have a flag of their own ("--runs-per-task" for runs_per_task); cpus_per_run is
// --threads-per-run (alias --cpus-per-run), which also sets train.threads.
const std::vector<std::string> kSlurmFlagKeys = {"partition",    "account",     "qos",         "time",       "mem",
                                                 "gpus_per_run", "runs_per_task", "max_running", "signal_lead"};

std::string flag_name(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

struct SweepArgs {
  std::string sweep_path, out, launcher = "local", status_dir, pack;
  int jobs = 0, threads_per_run = 1;
  bool force = false, dry_run = false;
  std::map<std::string, std::string> slurm_flags;  // key -> value, for the flags given
  std::vector<std::string> sbatch_lines;
  CLI::App* app = nullptr;
};

// The slurm: section with the flags applied; errors name the flag.
SlurmSettings slurm_settings(const SweepSpec& spec, const SweepArgs& a) {
  SlurmSettings settings = spec.slurm;
  for (const std::string& key : kSlurmFlagKeys)
    if (a.app->count(flag_name(key)) > 0)
      if (auto problem = set_slurm_setting(settings, key, a.slurm_flags.at(key)))
        throw Error(flag_name(key) + ": " + *problem);
  for (const std::string& line : a.sbatch_lines)
    if (auto problem = set_slurm_setting(settings, "sbatch", line)) throw Error("--sbatch: " + *problem);
  return settings;
}

int show_status(const std::string& dir) {
  // squeue is asked only when the directory has Slurm submissions: a local sweep's status needs no cluster.
  std::string why_not;
  std::optional<SlurmQueue> queue;
  const bool submitted = !read_submissions(dir).empty();
  if (submitted) queue = query_slurm_queue(why_not);
  const std::string note = submitted && !queue ? why_not + "; without Slurm's view a submitted run shows as its "
                                                           "status.json says, and queued runs as not started"
                                               : "";
  const SweepStatus status = read_sweep_status(dir, queue, note);
  std::cout << "sweep " << dir << "\n" << format_sweep_status(status);
  return 0;
}

int run_sweep_command(const SweepArgs& a) {
  if (!a.status_dir.empty()) {
    CANONLAB_CHECK(a.sweep_path.empty(), "--status DIR reads a sweep directory; give it without the sweep file ('" +
                                             a.sweep_path + "')");
    return show_status(a.status_dir);
  }
  CANONLAB_CHECK(!a.sweep_path.empty(), "give a sweep file (canonlab sweep SWEEP.yaml), or --status DIR");
  require_regular_file(a.sweep_path, "cannot read sweep file");
  CANONLAB_CHECK(a.launcher == "local" || a.launcher == "slurm",
                 "--launcher: '" + a.launcher + "' is not a launcher; allowed: local, slurm");
  const bool slurm = a.launcher == "slurm";
  if (!slurm) {
    for (const std::string& key : kSlurmFlagKeys)
      CANONLAB_CHECK(a.app->count(flag_name(key)) == 0, flag_name(key) + " is for --launcher slurm");
    CANONLAB_CHECK(a.sbatch_lines.empty(), "--sbatch is for --launcher slurm");
  } else {
    CANONLAB_CHECK(a.app->count("--jobs") == 0,
                   "--jobs is for the local launcher; with --launcher slurm, --max-running limits the array tasks at once");
    CANONLAB_CHECK(a.pack != "auto", "--pack auto sizes packs to this machine's memory; with --launcher slurm give "
                                     "the number of runs per pack (each pack is one array task)");
    CANONLAB_CHECK(a.pack.empty() || a.app->count("--runs-per-task") == 0,
                   "--pack N makes each array task one pack of up to N runs; give it or --runs-per-task, not both");
  }
  int pack = 0;  // --pack: 0 none, N, -1 auto
  if (!a.pack.empty()) {
    // -1 is how `auto` travels inside (SweepOptions::pack), never a spelling of it on the command line.
    const std::optional<long long> size = a.pack == "auto" ? std::optional<long long>(-1) : parse_integer<long long>(a.pack);
    CANONLAB_CHECK(size && (a.pack == "auto" || (*size >= 1 && *size <= 1000000)),
                   "--pack: '" + brief_text(a.pack) + "' is not a pack size; allowed: a whole number of runs from 1 to "
                   "1000000, or auto");
    pack = int(*size);
  }
  const SweepSpec spec = load_sweep_spec(a.sweep_path);
  const SlurmSettings settings = slurm ? slurm_settings(spec, a) : SlurmSettings{};
  // Threads per run: the flag, else (Slurm) the file's slurm.cpus_per_run, else 1.
  int threads = a.threads_per_run;
  if (slurm && a.app->count("--threads-per-run") == 0 && settings.cpus_per_run > 0) threads = settings.cpus_per_run;
  CANONLAB_CHECK(threads >= 1, "--threads-per-run must be at least 1, got " + std::to_string(threads));
  const std::vector<SweepRun> runs = expand_sweep(spec, threads);
  const std::string out_dir = a.out.empty() ? "runs/sweeps/" + spec.name : a.out;

  if (slurm) {
    SlurmSubmitOptions options;
    // Absolute: the array tasks may start in another working directory, on another node.
    options.out_dir = absolute_path(out_dir, "--out: sweep directory").string();
    if (options.out_dir.size() > 1 && options.out_dir.back() == '/') options.out_dir.pop_back();
    options.executable = running_executable();
    options.threads_per_run = threads;
    options.force = a.force;
    options.dry_run = a.dry_run;
    options.settings = settings;
    options.pack = pack;
    return submit_sweep(spec, runs, options, std::cout);
  }

  SweepOptions options;
  options.out_dir = out_dir;
  // Default budget: one run per core, each single-threaded (results then do not depend on --jobs).
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  options.jobs = a.jobs > 0 ? a.jobs : std::max(1, cores / threads);
  options.force = a.force;
  options.live = isatty(STDERR_FILENO);
  options.pack = pack;
  // The running binary itself, even if a rebuild replaces the file on disk meanwhile: every run of one
  // sweep invocation trains with the same code.
  options.executable = "/proc/self/exe";
  if (a.dry_run) {
    for (const SweepRun& run : runs) std::cout << options.out_dir << "/runs/" << run.name << "\n";
    std::cout << runs.size() << " runs, " << options.jobs << " at a time, " << threads << " thread(s) each";
    if (options.pack != 0) {
      std::vector<const SweepRun*> all;
      for (const SweepRun& run : runs) all.push_back(&run);
      const int size = options.pack > 0 ? options.pack : runs.empty() ? 1 : auto_pack_size(runs.front().config);
      std::cout << ", in " << group_into_packs(all, size).size() << " pack(s) of up to " << size << " runs";
    }
    std::cout << "\n";
    return 0;
  }
  const SweepOutcome outcome = run_sweep(spec, runs, options);
  // The shell's convention for a process ended by a signal, so a caller tells Ctrl-C (130) from a scancel or
  // kill (SIGTERM: 143) and a closed terminal (SIGHUP: 129).
  if (outcome.interrupted) return 128 + outcome.stop_signal;
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
  CLI::App* sub = app.add_subcommand("sweep", "Train every run of a sweep file's grid, in parallel or on Slurm; re-run to resume");
  a->app = sub;
  sub->add_option("sweep", a->sweep_path, "Sweep YAML file (base config, set:, axes:, slurm:)");
  sub->add_option("--jobs,-j", a->jobs, "Runs at a time (default: cores / threads-per-run)");
  sub->add_option("--threads-per-run,--cpus-per-run", a->threads_per_run,
                  "Threads of each run (train.threads; with Slurm also --cpus-per-task; default slurm.cpus_per_run or 1)");
  sub->add_option("--pack", a->pack,
                  "Train compatible runs (same parameter and activation shapes) in packs of N runs, or auto (as many "
                  "as half the free memory holds), each pack one process whose runs step side by side; every run "
                  "gives the bits it gives alone (docs/sweeps.md#packs)");
  sub->add_option("--out", a->out, "Sweep directory (default runs/sweeps/<sweep name>)");
  sub->add_flag("--force", a->force, "Accept a changed grid: unchanged runs are kept, changed ones are redone "
                                      "(their old directories move to DIR/superseded/)");
  sub->add_flag("--dry-run", a->dry_run, "List the runs (with --launcher slurm: print the sbatch script) and exit");
  sub->add_option("--status", a->status_dir, "Show where every run of sweep directory DIR stands (done, running, "
                                              "pending, stopped, failed, not started) and exit");
  sub->add_option("--launcher", a->launcher, "local (default): child processes here; slurm: submit an sbatch array");
  const std::map<std::string, std::string> help = {
      {"partition", "Slurm partition (slurm.partition)"},
      {"account", "Slurm account (slurm.account)"},
      {"qos", "Slurm QOS (slurm.qos)"},
      {"time", "Time limit of each array task, e.g. 4:00:00 (slurm.time)"},
      {"mem", "Memory of each array task, e.g. 8G (slurm.mem)"},
      {"gpus_per_run", "GPUs per run: --gres=gpu:G (slurm.gpus_per_run)"},
      {"runs_per_task", "Runs trained one after the other in one array task (slurm.runs_per_task; default 1)"},
      {"max_running", "Array tasks at once: --array=...%P (slurm.max_running)"},
      {"signal_lead", "Seconds before the time limit that SIGUSR1 asks for a checkpoint and a requeue "
                      "(slurm.signal_lead; default 120)"}};
  for (const std::string& key : kSlurmFlagKeys) sub->add_option(flag_name(key), a->slurm_flags[key], help.at(key));
  sub->add_option("--sbatch", a->sbatch_lines, "An extra #SBATCH line, e.g. --sbatch=--constraint=a100 (repeatable; "
                                                "after the file's slurm.sbatch)");
  return {sub, [a] { return run_sweep_command(*a); }};
}

Command add_sweep_task_command(CLI::App& app) {
  auto submission = std::make_shared<std::string>();
  auto task = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("sweep-task", "Internal: train the runs of one Slurm array task of a submitted sweep");
  sub->group("");  // not listed in --help: the sbatch script of `canonlab sweep --launcher slurm` runs it
  sub->add_option("submission", *submission, "SWEEP_DIR/slurm/submit-N.json")->required();
  sub->add_option("task", *task, "Array task index (SLURM_ARRAY_TASK_ID)")->required();
  return {sub, [submission, task] {
            const std::optional<int> index = parse_integer<int>(*task);
            CANONLAB_CHECK(index && *index >= 0, "sweep-task: task '" + *task + "' is not an array task index (0, 1, ...)");
            return run_sweep_task(*submission, *index);
          }};
}

}  // namespace canonlab::cli
