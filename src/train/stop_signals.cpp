#include "train/stop_signals.h"

namespace canonlab {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;  // see the header: the one word a handler may write

extern "C" void record_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
}

void install(int sig, struct sigaction& previous) {
  struct sigaction action{};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;  // a second signal takes the default action: terminate
  sigaction(sig, &action, &previous);
}
}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  install(SIGUSR1, previous_usr1_);
  install(SIGTERM, previous_term_);
  install(SIGINT, previous_int_);
}

StopSignals::~StopSignals() {
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
  g_stop_signal = 0;
}

int StopSignals::received() const { return g_stop_signal; }

}  // namespace canonlab
