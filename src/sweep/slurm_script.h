#pragma once
// The sbatch script of one Slurm submission of a sweep (SWEEP_DIR/slurm/submit-N.sh): one array task per group
// of runs, each running `canonlab sweep-task SWEEP_DIR/slurm/submit-N.json TASK`, which trains the group's runs
// one after the other exactly as the local launcher would (sweep/slurm_worker.h).
//
// The script asks for what the time-limit path needs: --signal=B:USR1@LEAD (Slurm warns the batch shell, which
// is the worker itself through `exec`, LEAD seconds before the limit), --requeue so the worker may put its task
// back in the queue after the checkpoint, and --open-mode=append so a requeued task's log continues.
#include <string>

#include "sweep/sweep_spec.h"

namespace canonlab {

struct SlurmScriptInputs {
  std::string sweep_name;
  std::string executable;       // absolute path of canonlab, on a file system every node sees
  std::string submission_file;  // absolute: SWEEP_DIR/slurm/submit-N.json
  std::string log_dir;          // absolute: SWEEP_DIR/slurm/logs (Slurm's output, %A_%a.out)
  int tasks = 1;                // array tasks 0 .. tasks-1
  int runs = 1;                 // runs they cover (for the comment)
  int cpus_per_task = 1;        // = train.threads of every run
  SlurmSettings settings;
};

// The script's text. Throws canonlab::Error for a path Slurm cannot take in an #SBATCH line (a '"', a backslash
// or a line break in it), naming the path.
std::string make_sbatch_script(const SlurmScriptInputs& inputs);

// 'text' for a POSIX shell: single quotes, with ' written as '\''.
std::string shell_quote(const std::string& text);

}  // namespace canonlab
