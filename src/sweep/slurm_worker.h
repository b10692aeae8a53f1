#pragma once
// One Slurm array task of a submitted sweep: `canonlab sweep-task SWEEP_DIR/slurm/submit-N.json TASK` (the last
// line of the sbatch script). It trains the task's runs one after the other, each as the local launcher does
// (sweep/run_attempt.h): skipped when finished, resumed from its checkpoint when there is one.
//
// Signals. The worker is the batch shell (exec), so Slurm's B:USR1 time-limit warning, scancel's SIGTERM and the
// time limit's SIGTERM reach it; the trainer runs in a process group of its own and hears of them only from the
// worker, once (see SignalForwarder in the .cpp). After the warning the trainer checkpoints and exits with
// kExitStoppedBySignal, and the worker requeues its own array task (scontrol requeue JOB_TASK; the script has
// --requeue and --open-mode=append), so the task starts again later and resumes bit-exactly. After SIGTERM the
// run is recorded as interrupted (resumable) and the worker exits: the next submission resumes it.
//
// status.json gains "slurm_job" ("123_4") and "slurm_restarts" (SLURM_RESTART_COUNT) on every attempt.
#include <string>

namespace canonlab {

// Exit status: 0 when every run finished or the task was requeued, 1 when a run failed, kExitStoppedBySignal
// when it was stopped without a requeue.
int run_sweep_task(const std::string& submission_file, int task_index);

}  // namespace canonlab
