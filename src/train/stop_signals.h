#pragma once
// A graceful stop for training: SIGUSR1 (Slurm's time-limit warning, `--signal=B:USR1@120`), SIGTERM (scancel,
// preemption, the sweep runner stopping) and SIGINT (Ctrl-C) make the run finish the step in progress, write a
// checkpoint and exit with kExitStoppedBySignal, so that `--resume` (or a requeued job) continues bit-exactly. A
// second signal of the same kind kills at once (the handler resets itself), for a run stuck in a long step.
//
// The handler only records the signal number; the training loop polls it between steps. That one word is the
// only process-wide state of the engine: a signal handler has nowhere else to write. The guard restores the
// previous dispositions when training returns, so tests that train in-process leave no handler behind.
#include <csignal>

namespace canonlab {

// Exit status of `canonlab train` after a graceful stop (EX_TEMPFAIL: "try again", which is what resuming does).
inline constexpr int kExitStoppedBySignal = 75;

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received since construction, or 0.
  int received() const;

 private:
  struct sigaction previous_usr1_{}, previous_term_{}, previous_int_{};
};

// Thrown by the training loop after the checkpoint of a graceful stop is written; the CLI turns it into
// kExitStoppedBySignal and its message.
struct StoppedBySignal {
  int signal = 0;
  int step = 0;
};

}  // namespace canonlab
