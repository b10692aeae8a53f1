#pragma once
// The named moments of a training run, in order, and a hook called at each: what the tests of signal handling and
// of kill-and-resume use to act on a run at a state they can observe instead of at a moment on the clock.
//
//   start              train() was entered (stop signals are caught from here on)
//   before-first-step  model built, checkpoint loaded (--resume), about to take the first step of this session
//   after-step:N       step N is done: its metrics, evaluation and checkpoint are written
//   final-eval         the last step is done; the final evaluation is about to run
//   probe              the final probe is about to run
//   summary            summary.json is about to be written
//   returned           train() returned (the CLI only: it prints the run directory and exits 0 next)
//
// A stop signal up to and during the last step stops the run after the step in progress with a checkpoint (exit 75);
// one that arrives later lets the run finish (exit 0) and is reported.
#include <functional>
#include <string>
#include <string_view>

namespace canonlab {

// phase: one of the names above ("after-step" without its number); step: the steps done so far.
using PhaseHook = std::function<void(std::string_view phase, int step)>;

// The hook of CANONLAB_PAUSE_AT=<phase> (after-step:N for one step): at that point the process stops itself with
// SIGSTOP, so a test can see it stopped (waitpid WUNTRACED, or state T in /proc/PID/stat), signal it, and let it
// go on with SIGCONT. Empty when the variable is unset; an unknown value is an error naming the allowed ones.
// once: only the first time any caller reaches the phase (a pack's runs share one hook).
PhaseHook pause_hook_from_environment(bool once = false);

}  // namespace canonlab
