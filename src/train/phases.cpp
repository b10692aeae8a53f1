#include "train/phases.h"

#include <csignal>
#include <atomic>
#include <cstdlib>
#include <memory>

#include "engine/error.h"

namespace canonlab {

namespace {
constexpr std::string_view kAllowed =
    "start, before-first-step, after-step:N (N >= 1), final-eval, probe, summary, returned";

constexpr std::string_view kPhases[] = {"start", "final-eval", "probe", "summary", "returned", "before-first-step"};
}  // namespace

PhaseHook pause_hook_from_environment(bool once) {
  const char* value = std::getenv("CANONLAB_PAUSE_AT");
  if (value == nullptr || *value == '\0') return {};
  const std::string text = value;
  std::string phase = text;
  int step = 0;
  if (text.starts_with("after-step:")) {
    const std::string digits = text.substr(11);
    const bool numeric = !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
    step = numeric ? std::atoi(digits.c_str()) : 0;
    if (step < 1)
      throw Error("CANONLAB_PAUSE_AT: '" + text + "' needs a step number of at least 1 after 'after-step:'; allowed: " +
                  std::string(kAllowed));
    phase = "after-step";
  } else {
    bool known = false;
    for (std::string_view p : kPhases) known = known || p == text;
    if (!known)
      throw Error("CANONLAB_PAUSE_AT: '" + text + "' is not a phase of a training run; allowed: " + std::string(kAllowed));
  }
  return [phase, step, once, paused = std::make_shared<std::atomic<bool>>(false)](std::string_view at, int steps_done) {
    if (at == phase && (phase != "after-step" || steps_done == step) && !(once && paused->exchange(true)))
      std::raise(SIGSTOP);
  };
}

}  // namespace canonlab
