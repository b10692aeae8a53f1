#include "sweep/sweep_status.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/json_read.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Whether some process holds RUN_DIR/.train.lock (flock: it vanishes with its holder, kill -9 included). Only
// asked for runs a local sweep trains: across the nodes of a cluster flock may not be shared.
bool trainer_holds_lock(const fs::path& run_dir) {
  const int fd = ::open((run_dir / ".train.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the shared lock if it was taken
  return held;
}

}  // namespace

const char* run_status_name(RunStatus status) {
  switch (status) {
    case RunStatus::done: return "done";
    case RunStatus::running: return "running";
    case RunStatus::pending: return "pending";
    case RunStatus::stopped: return "stopped";
    case RunStatus::failed: return "failed";
    case RunStatus::not_started: return "not started";
  }
  return "?";
}

RunStatus classify_run(const RunEvidence& e) {
  if (e.disk == RunDiskState::finished) return RunStatus::done;
  if (e.queued) return is_running_state(e.queued->state) ? RunStatus::running : RunStatus::pending;
  if (e.state == "failed") return RunStatus::failed;
  if (e.state == "running") {
    // A Slurm run's status.json says running until its task records the end; a task killed without notice
    // (scancel past KillWait, a node failure) never does, and squeue is what tells.
    if (e.slurm) return e.queue_known ? RunStatus::stopped : RunStatus::running;
    return e.trainer_holds_lock ? RunStatus::running : RunStatus::stopped;
  }
  if (e.state == "interrupted" || e.disk == RunDiskState::resumable) return RunStatus::stopped;
  return RunStatus::not_started;
}

SweepStatus read_sweep_status(const std::string& sweep_dir, const std::optional<SlurmQueue>& queue,
                              const std::string& queue_note) {
  const fs::path dir(sweep_dir);
  const std::optional<std::string> manifest_text = read_text_if_exists(dir / "sweep.json", "sweep manifest");
  CANONLAB_CHECK(manifest_text, "'" + sweep_dir + "' is not a sweep directory: it has no sweep.json (`canonlab sweep` "
                                "writes one when it starts or submits a sweep)");
  const auto manifest = parse_json_or_discarded(*manifest_text);
  CANONLAB_CHECK(manifest.is_object() && manifest.contains("runs") && manifest["runs"].is_array(),
                 "'" + (dir / "sweep.json").string() + "' is not a sweep manifest (no list of runs)");
  const std::map<std::string, QueuedRun> queued =
      queue ? queued_runs(read_submissions(sweep_dir), *queue) : std::map<std::string, QueuedRun>{};

  SweepStatus status;
  status.dir = sweep_dir;
  status.queue_note = queue_note;
  for (const auto& run : manifest["runs"]) {
    const bool well_formed = run.is_object() && run.contains("name") && run["name"].is_string() && run.contains("config") &&
                             run["config"].is_object() && run["config"].contains("train") &&
                             run["config"]["train"].is_object() && run["config"]["train"].contains("steps") &&
                             run["config"]["train"]["steps"].is_number_integer();
    CANONLAB_CHECK(well_formed, "'" + (dir / "sweep.json").string() + "' lists a run without name or train.steps");
    RunStatusRow row;
    row.name = run["name"];
    row.steps = run["config"]["train"]["steps"];
    const fs::path run_dir = dir / "runs" / row.name;
    RunEvidence e;
    e.has_dir = is_directory_at(run_dir, "cannot read run directory");
    e.disk = inspect_run_dir(run_dir.string(), row.steps);
    e.queue_known = queue.has_value();
    const auto run_status = parse_json_or_discarded(read_text_if_exists(run_dir / "status.json", "run status").value_or(""));
    std::string slurm_job;
    int restarts = 0;
    std::string error;
    if (run_status.is_object()) {
      e.state = run_status.value("state", "");
      slurm_job = run_status.value("slurm_job", "");
      restarts = run_status.value("slurm_restarts", 0);
      error = run_status.value("error", "");
    }
    e.slurm = !slurm_job.empty();
    if (!e.slurm && e.state == "running") e.trainer_holds_lock = trainer_holds_lock(run_dir);
    if (auto it = queued.find(row.name); it != queued.end()) e.queued = it->second;
    row.status = classify_run(e);

    std::string detail;
    switch (row.status) {
      case RunStatus::done: row.step = row.steps; break;
      case RunStatus::running:
        row.step = latest_logged_step(run_dir.string()).value_or(checkpoint_step(run_dir.string()));
        detail = e.queued ? "job " + e.queued->task_id : e.slurm ? "job " + slurm_job + " (status.json; squeue unknown)" : "local";
        break;
      case RunStatus::pending: row.step = checkpoint_step(run_dir.string()); detail = "job " + e.queued->task_id + " " + e.queued->state; break;
      case RunStatus::stopped:
        row.step = checkpoint_step(run_dir.string());
        detail = "resumes from step " + std::to_string(row.step);
        break;
      case RunStatus::failed: row.step = checkpoint_step(run_dir.string()); detail = error; break;
      case RunStatus::not_started: break;
    }
    if (restarts > 0) detail += (detail.empty() ? "" : ", ") + std::to_string(restarts) + " Slurm restart(s)";
    row.detail = detail;
    status.runs.push_back(std::move(row));
  }
  return status;
}

std::string format_sweep_status(const SweepStatus& status) {
  size_t width = 3;
  for (const auto& row : status.runs) width = std::max(width, row.name.size());
  std::ostringstream out;
  std::array<int, 6> counts{};
  for (const auto& row : status.runs) {
    counts[size_t(row.status)]++;
    std::string steps = std::to_string(row.step) + "/" + std::to_string(row.steps);
    out << "  " << run_status_name(row.status) << std::string(12 - std::string(run_status_name(row.status)).size(), ' ')
        << row.name << std::string(width - row.name.size() + 2, ' ') << std::string(steps.size() < 11 ? 11 - steps.size() : 0, ' ')
        << steps << (row.detail.empty() ? "" : "  " + row.detail) << "\n";
  }
  out << status.runs.size() << " runs: ";
  for (size_t i = 0; i < counts.size(); i++)
    out << (i ? ", " : "") << counts[i] << " " << run_status_name(RunStatus(i));
  out << "\n";
  if (!status.queue_note.empty()) out << "note: " << status.queue_note << "\n";
  return out.str();
}

}  // namespace canonlab
