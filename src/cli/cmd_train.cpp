// canonlab train CONFIG [--set k=v]... [--out DIR] [--resume | --force] [--quiet] [--dry-run]
// Before anything is allocated the run's memory is estimated (train/resource_estimate.h) and a run that would not
// fit is refused; --dry-run prints the estimate (memory, parameters, FLOPs, time) and stops there.
// Started by mpirun / srun --mpi=pmix with N ranks, each process trains its share of every batch
// (engine/comm/launch.h, docs/cluster.md). A stop signal ends the run after a checkpoint with exit status 75; one
// that arrives after the last step lets it finish (exit 0) and is reported. CANONLAB_PAUSE_AT (train/phases.h)
// stops the process at a named phase, for tests.
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "engine/comm/launch.h"
#include "engine/error.h"
#include "train/resource_estimate.h"
#include "train/trainer.h"

namespace canonlab::cli {

namespace {

struct TrainArgs {
  std::string config_path, out;
  std::vector<std::string> sets;
  bool resume = false, quiet = false, dry_run = false, int8 = false, force = false;
};

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

int run_train(const TrainArgs& a) {
  // From here to the exit a stop signal is caught (train/stop_signals.h): before and during the last step it stops
  // the run with a checkpoint, later it lets the run finish.
  const StopSignals stop_signals;
  const PhaseHook pause_at = pause_hook_from_environment();
  if (a.int8)
    throw Error("--int8: int8 is post-training quantization for canonlab eval and canonlab generate; training updates "
                "fp32 weights (train.precision: fp32 | bf16)");
  RunConfig cfg = load_config(a.config_path, a.sets);
  const ResourceEstimate estimate = estimate_resources(cfg, a.resume ? Purpose::resume : Purpose::train);
  if (a.dry_run) {
    const TimeEstimate time = estimate_time(estimate, cfg);
    std::cout << format_estimate(estimate, cfg, &time) << std::flush;
    check_resources(estimate, cfg);  // a run that would be refused says so, and exits 2
    std::cout << "dry run: nothing was trained and no run directory was created\n";
    return 0;
  }
  check_resources(estimate, cfg);
  TrainOptions opt;
  opt.out_dir = a.out.empty() ? "runs/" + std::filesystem::path(a.config_path).stem().string() : a.out;
  opt.resume = a.resume;
  opt.force = a.force;
  opt.progress = !a.quiet;
  opt.stop_signals = &stop_signals;
  opt.at_phase = pause_at;
  const LaunchEnvironment launch = detect_launch_environment();
  const std::unique_ptr<Communicator> comm = make_communicator(launch, cfg.train.device);
  opt.comm = comm.get();
  const bool writer = comm->rank() == 0;
  if (comm->size() > 1 && writer)
    std::fprintf(stderr, "data-parallel: %d ranks (%s, %s), %d micro-batch(es) of %d sequences per rank\n",
                 comm->size(), launch.description.c_str(), comm->name().c_str(), cfg.train.micro_batches,
                 cfg.train.batch_size / (comm->size() * cfg.train.micro_batches));
  nlohmann::json s;
  try {
    s = train(cfg, opt);
  } catch (const StoppedBySignal& stop) {
    if (writer)
      std::fprintf(stderr, "\nstopped by %s: checkpoint at step %d written to %s/checkpoints; continue with --resume\n",
                   signal_name(stop.signal).c_str(), stop.step, opt.out_dir.c_str());
    return kExitStoppedBySignal;
  } catch (const std::exception& e) {
    if (comm->size() == 1) throw;
    // The other ranks wait in a collective for this one: end them all, saying which rank failed and why.
    std::fprintf(stderr, "error: rank %d of %d: %s\n", comm->rank(), comm->size(), e.what());
    comm->abort(2);
  }
  if (pause_at) pause_at("returned", cfg.train.steps);
  if (!writer) return 0;
  if (const int sig = stop_signals.received())
    std::fprintf(stderr, "\n%s arrived after the last step: the run finished (its final evaluation and summary are written)\n",
                 signal_name(sig).c_str());
  std::cout << "\nrun directory: " << opt.out_dir << "\n";
  if (s.contains("eval")) std::cout << "final eval: " << s["eval"].dump() << "\n";
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand("train", "Train a model from a YAML config");
  sub->add_option("config", a->config_path, "YAML config file")->required()->check(CLI::ExistingFile);
  sub->add_option("--set", a->sets, "Override a config key: --set model.canon.set=ABCD (repeatable)");
  sub->add_option("--out", a->out, "Run directory (default runs/<config name>)");
  sub->add_flag("--resume", a->resume, "Continue bit-exactly from the run directory's latest checkpoint");
  sub->add_flag("--force", a->force,
                "Train afresh where a run already is, moving its files to RUN_DIR/superseded/<time>/ (without it "
                "such a directory is refused)");
  sub->add_flag("--quiet", a->quiet, "No progress bar");
  sub->add_flag("--int8", a->int8, "Refused: int8 is for eval and generate (post-training quantization)");
  sub->add_flag("--dry-run", a->dry_run,
                "Print the estimated memory, parameters, FLOPs and time of the run, then stop (docs/resources.md)");
  return {sub, [a] { return run_train(*a); }};
}

}  // namespace canonlab::cli
