#pragma once
// `canonlab sweep --status DIR`: where every run of a sweep directory stands, from its run directories and, for
// runs submitted to Slurm, from squeue. Either launcher's directories read the same way.
//
//   done         summary.json covers all steps
//   running      its Slurm array task is running; a local run whose trainer holds RUN_DIR/.train.lock;
//                or, when squeue cannot be asked, a Slurm run whose status.json says running
//   pending      its Slurm array task waits in the queue
//   stopped      started and not finished, nothing trains it now: the next submission (or local run) resumes it
//                from its checkpoint; this includes a run whose status.json says running but whose job is gone
//   failed       its last attempt failed (status.json has the error); the next submission tries it again
//   not started  nothing of it is on disk and nothing queued
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sweep/run_attempt.h"
#include "sweep/slurm_queue.h"

namespace canonlab {

enum class RunStatus { done, running, pending, stopped, failed, not_started };
const char* run_status_name(RunStatus status);

// What classify_run looks at, gathered from one run directory (and squeue).
struct RunEvidence {
  RunDiskState disk = RunDiskState::fresh;
  bool has_dir = false;
  std::string state;                  // status.json's "state", or empty
  bool slurm = false;                 // status.json names a Slurm job: a Slurm array task trained it
  bool trainer_holds_lock = false;    // a live `canonlab train` holds RUN_DIR/.train.lock (this machine's view)
  std::optional<QueuedRun> queued;    // its array task, when squeue lists it
  bool queue_known = false;           // squeue answered
};

RunStatus classify_run(const RunEvidence& evidence);

struct RunStatusRow {
  std::string name;
  RunStatus status = RunStatus::not_started;
  int step = 0, steps = 0;  // latest logged step (running), checkpoint step (stopped, failed), steps (done)
  std::string detail;       // the Slurm task, its restarts, the error of a failed run
};

struct SweepStatus {
  std::string dir;
  std::vector<RunStatusRow> runs;
  std::string queue_note;  // why squeue's view is missing, or empty
};

// Reads SWEEP_DIR/sweep.json and every run directory; `queue` is squeue's answer, or nothing with `queue_note`.
SweepStatus read_sweep_status(const std::string& sweep_dir, const std::optional<SlurmQueue>& queue,
                              const std::string& queue_note);

// One line per run, then the totals ("6 runs: 6 done, 0 running, ...").
std::string format_sweep_status(const SweepStatus& status);

}  // namespace canonlab
