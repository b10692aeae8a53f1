#pragma once
// The training loop: data -> forward -> masked loss -> backward -> clip -> AdamW, with evaluation on fixed
// held-out batches, checkpoints, metrics files, a progress bar, and a NaN/inf guard that names the first
// module whose output went non-finite.
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "engine/comm/communicator.h"
#include "train/phases.h"
#include "train/stop_signals.h"

namespace canonlab {

struct TrainOptions {
  std::string out_dir;
  bool resume = false;
  // Without resume: train afresh in a directory that holds an earlier run, moving its files to
  // out_dir/superseded/<time>/ (train/run_directory.h); without force such a directory is refused.
  bool force = false;
  bool progress = true;  // progress bar on stderr
  bool probe_at_end = true;
  // Draw the next step's batches on a helper thread during the step (train/batch_prefetch.h); the same bits either way.
  bool prefetch_batches = true;
  // The ranks of a data-parallel run (engine/comm/); null = this process alone. Rank 0 writes the run directory
  // (checkpoints, metrics, progress bar, evaluations, summary); the other ranks only compute their share.
  Communicator* comm = nullptr;
  // The caller's stop-signal guard when it catches signals for longer than train() (the CLI: from its start to its
  // exit); null = train() catches them itself for its whole duration.
  const StopSignals* stop_signals = nullptr;
  // Called at each phase of the run (train/phases.h); the CLI's pauses for CANONLAB_PAUSE_AT, a test's actions.
  PhaseHook at_phase;
  // Called with every record written to metrics.jsonl (train and eval records), after it is written; the Python
  // API's on_step callback. An exception it throws ends the run (the latest checkpoint stays resumable).
  std::function<void(const nlohmann::json& record)> on_metrics;
};

// One run's training as three calls, so that several runs can train side by side in one process (train/pack.h):
// the constructor prepares the run directory and the model (resuming from its checkpoint with options.resume), each
// step() trains one step with its metrics, evaluation and checkpoint, and finish() writes the summary. train() below
// is exactly these calls, so a run trained through them gives the bits of `canonlab train`.
class TrainingRun {
 public:
  // stop_signals: the process's guard, which must outlive the run.
  TrainingRun(const RunConfig& cfg, const TrainOptions& options, const StopSignals& stop_signals);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  int steps_done() const;
  bool all_steps_done() const;
  // Trains the next step. A stop signal received up to its start ends it with a checkpoint and throws
  // StoppedBySignal; a non-finite loss or gradient, a full disk, a bad batch throw Error.
  void step();
  // Final evaluation (unless the last step made it), probe and summary.json; the summary (other ranks: {"rank": r}).
  nlohmann::json finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Runs the whole training described by cfg; returns the summary also written to out_dir/summary.json (on ranks
// other than 0: {"rank": r}). SIGUSR1, SIGTERM or SIGINT up to and during the last step end it after the step in
// progress with a checkpoint, by throwing StoppedBySignal (train/stop_signals.h); one that arrives later (final
// evaluation, probe, summary) lets the run finish, and stop_signals->received() tells the caller it came.
nlohmann::json train(const RunConfig& cfg, const TrainOptions& options);

}  // namespace canonlab
