#pragma once
// `canonlab sweep SWEEP.yaml --launcher slurm`: submits the sweep's unfinished runs as one sbatch array. The sweep
// directory is the state, exactly as with the local launcher (sweep/runner.h), plus SWEEP_DIR/slurm/:
//   submit-N.sh    the sbatch script of the N-th submission (sweep/slurm_script.h)
//   submit-N.json  its job id and the runs of each array task (sweep/slurm_queue.h)
//   logs/%A_%a.out Slurm's output of each array task (the runs' own output is in runs/<name>/train.log)
// The directory checks are the local launcher's: a changed grid is refused unless --force. A submission
// leaves out the finished runs and those whose array task of an earlier submission squeue still lists
// (pending or running); when squeue cannot be asked and earlier submissions exist, it refuses rather than
// train a run twice.
#include <iosfwd>
#include <string>
#include <vector>

#include "sweep/sweep_spec.h"

namespace canonlab {

struct SlurmSubmitOptions {
  std::string out_dir;     // absolute
  std::string executable;  // absolute path of this canonlab binary
  int threads_per_run = 1; // train.threads = --cpus-per-task
  // > 0: each array task trains a pack of up to `pack` compatible runs side by side (train/pack.h) instead of
  // settings.runs_per_task runs in turn, with --cpus-per-task for all of them
  int pack = 0;
  bool force = false, dry_run = false;
  SlurmSettings settings;  // the sweep file's slurm: section with the flags applied
};

// Prints what it did (or, with dry_run, the script it would submit) to `out`; returns the exit status.
int submit_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SlurmSubmitOptions& options,
                 std::ostream& out);

// The running binary's absolute path (readlink /proc/self/exe); it must be on a file system the nodes share.
std::string running_executable();

}  // namespace canonlab
