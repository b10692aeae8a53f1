#pragma once
// Runs a sweep's grid: each run trains in its own child process (`canonlab train`) with a fixed thread budget,
// `jobs` at a time, with a live overview. The sweep directory is the state:
//   SWEEP_DIR/sweep.json            what the grid is (sweep/manifest.h); a different grid is refused unless force
//   SWEEP_DIR/runs/<name>/          one run: run.yaml, train.log, status.json, plus everything `train` writes
// A run whose summary.json covers all its steps is finished and skipped; one with a checkpoint resumes from it
// (bit-exact); any other starts afresh. So re-running the same command after a kill loses and repeats nothing.
// The Slurm launcher (sweep/slurm_launcher.h) shares the directory checks and each run's attempt (run_attempt.h).
#include <string>
#include <vector>

#include "sweep/run_attempt.h"
#include "sweep/sweep_spec.h"

namespace canonlab {

struct SweepOptions {
  std::string out_dir;
  int jobs = 1;             // runs at once
  // 0: each run in its own process. N > 0: compatible runs (train/pack.h) in packs of up to N, each pack one process
  // whose runs step side by side (at most `jobs` at once in all); -1 (auto): packs as large as memory allows.
  int pack = 0;
  bool force = false;       // accept a changed grid; runs whose config changed are moved to SWEEP_DIR/superseded/
  bool live = true;         // redraw the overview in place (a terminal); otherwise print a line per event
  std::string executable;   // the canonlab binary that trains a run
};

struct SweepOutcome {
  int total = 0, done = 0, failed = 0, skipped = 0;
  bool interrupted = false;
  int stop_signal = 0;  // interrupted: the signal that stopped the sweep (SIGINT, SIGTERM or SIGHUP)
  std::vector<std::string> failures;  // "name: error"
};

SweepOutcome run_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SweepOptions& options);

// Makes `dir` the sweep directory of this grid, for either launcher; the caller holds its .sweep.lock. A different
// grid recorded in sweep.json is refused unless force (which moves the changed runs to DIR/superseded/), as is a
// run directory trained with another config; then sweep.json is (re)written.
void prepare_sweep_directory(const std::string& dir, const SweepSpec& spec, const std::vector<SweepRun>& runs,
                             bool force);

}  // namespace canonlab
