#pragma once
// One attempt at training one run of a sweep, the same for every launcher (the local runner, a Slurm array task):
// the same child command (`canonlab train RUN_DIR/run.yaml --out RUN_DIR --quiet [--resume]`), the same files
// (run.yaml, train.log, status.json) and the same reading of how it ended. That is what makes a sweep trained
// on a cluster identical to one trained locally, and lets either launcher continue the other's runs.
//
// status.json's "state": "running" while an attempt trains, then "done", "failed" (with "error"), or
// "interrupted" (stopped by a signal; its checkpoint resumes bit-exactly). Launchers may add fields (the Slurm
// job, its restart count) through `extra`.
#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sweep/child_process.h"

namespace canonlab {

// A run directory's state on disk, as the launchers see it: summary.json covering all steps = finished;
// a checkpoint = resumable; anything else starts afresh.
enum class RunDiskState { fresh, resumable, finished };
RunDiskState inspect_run_dir(const std::string& run_dir, int steps);

// The step of a run's latest checkpoint; 0 when there is none or it is unreadable (training reports that).
int checkpoint_step(const std::string& run_dir);

// The step of the newest complete record in RUN_DIR/metrics.jsonl, read from its tail.
std::optional<int> latest_logged_step(const std::string& run_dir);

// RUN_DIR/status.json with `status` plus the time; atomic, so a reader never sees half of it.
void write_status(const std::string& run_dir, nlohmann::json status);

// A finished run whose status.json does not say so (the launcher was killed between the run's summary and
// its status line) is marked done.
void mark_done_if_unmarked(const std::string& run_dir);

struct RunAttempt {
  ChildProcess process;
  int start_step = 0;  // the checkpoint it resumed from, or 0
  std::chrono::steady_clock::time_point started;
};

// Writes run.yaml, marks the run running (plus `extra`) and starts `executable train ...`, resuming from the
// latest checkpoint when there is one, and with --force when an earlier attempt left results but no checkpoint
// (they move to RUN_DIR/superseded/). own_process_group: see ChildProcess.
RunAttempt start_run_attempt(const std::string& run_dir, const std::string& run_yaml, int steps,
                             const std::string& executable, const nlohmann::json& extra = nlohmann::json::object(),
                             bool own_process_group = false);

enum class AttemptEnd { done, interrupted, failed };
struct AttemptResult {
  AttemptEnd end = AttemptEnd::failed;
  std::string error;  // failed: the log's error line (or what else went wrong); interrupted: how it stopped
};

// Reads how an attempt ended and records it in status.json (plus `extra`). A run counts as interrupted when
// `canonlab train` stopped gracefully on a signal (kExitStoppedBySignal: its checkpoint is written), or when it
// died of `forwarded_signal`, the one its launcher passed on (before training installs its handlers, a stop
// signal still has its default action); otherwise anything short of a finished run is a failure.
AttemptResult finish_run_attempt(const std::string& run_dir, int steps, const ChildExit& exit, double seconds,
                                 int forwarded_signal = 0, const nlohmann::json& extra = nlohmann::json::object());

}  // namespace canonlab
