#pragma once
// What Slurm holds of a sweep: the submissions made from its directory (SWEEP_DIR/slurm/submit-N.json, each with
// its sbatch job id and which runs each array task trains) and what squeue says about their array tasks. Together
// they tell which runs are pending or running in Slurm, so a re-submission leaves those alone and `--status`
// can tell a running run from one whose job is gone.
//
// submit-N.json, format "canonlab-slurm-submission/1":
//   {"format", "sweep_dir", "job_id" (empty until sbatch answered), "runs_per_task",
//    "tasks": [[{"name", "steps"}, ...], ...]}      (task i of the array trains tasks[i], in order)
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace canonlab {

inline constexpr const char* kSlurmSubmissionFormat = "canonlab-slurm-submission/1";

struct SlurmTaskRun {
  std::string name;
  int steps = 0;
};

struct SlurmSubmission {
  int number = 0;  // N of submit-N
  std::string sweep_dir, job_id;
  int runs_per_task = 1;
  std::vector<std::vector<SlurmTaskRun>> tasks;
  bool pack = false;  // each task trains its runs side by side in one process (canonlab train-pack), not in turn
};

std::string submission_path(const std::string& sweep_dir, int number);  // SWEEP_DIR/slurm/submit-N.json
std::string submission_script_path(const std::string& sweep_dir, int number);  // SWEEP_DIR/slurm/submit-N.sh

// Reads one submission file; throws canonlab::Error naming the file and what is wrong with it.
SlurmSubmission read_submission(const std::string& path);
void write_submission(const std::string& path, const SlurmSubmission& submission);

// Every submission of the directory that got a job id, by number.
std::vector<SlurmSubmission> read_submissions(const std::string& sweep_dir);

// squeue's view: "JOBID_TASK" -> state ("PENDING", "RUNNING", "COMPLETING", ...), array tasks one by one.
using SlurmQueue = std::map<std::string, std::string>;

// Asks squeue for this user's jobs. Nothing when squeue cannot answer; `why_not` then says why.
std::optional<SlurmQueue> query_slurm_queue(std::string& why_not);

// Reads `squeue --noheader --array --format='%i %T'` output.
SlurmQueue parse_squeue_output(const std::string& text);

// RUNNING and the states around it (CONFIGURING, COMPLETING, ...); every other state squeue lists is waiting.
bool is_running_state(const std::string& squeue_state);

struct QueuedRun {
  std::string task_id;  // "123_4"
  std::string state;    // squeue's
};

// The runs whose array task squeue lists, by run name.
std::map<std::string, QueuedRun> queued_runs(const std::vector<SlurmSubmission>& submissions, const SlurmQueue& queue);

}  // namespace canonlab
