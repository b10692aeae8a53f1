#include "engine/threads.h"

#include <pthread.h>
#include <sys/resource.h>

#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"

namespace canonlab {

namespace {

// The stack size libgomp gives its threads: OMP_STACKSIZE, else GOMP_STACKSIZE, a whole number with an optional
// unit B, K, M or G (K when none), as libgomp reads them; nothing when neither is set (or libgomp would refuse the
// value): then its threads get the pthread default, the soft `ulimit -s`.
std::optional<size_t> openmp_stack_size() {
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    const char* text = std::getenv(name);
    if (!text) continue;
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end == text || errno != 0) return std::nullopt;
    while (std::isspace(static_cast<unsigned char>(*end))) end++;
    int shift = 10;
    switch (std::tolower(static_cast<unsigned char>(*end))) {
      case 'b': shift = 0; break;
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      default: end--; break;  // no unit: kilobytes
    }
    end++;
    while (std::isspace(static_cast<unsigned char>(*end))) end++;
    if (*end != '\0' || value > (~0ull >> shift)) return std::nullopt;
    return size_t(value << shift);
  }
  return std::nullopt;
}

std::string mib(double bytes) {
  char text[32];
  if (bytes >= double(1ull << 30)) std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
  else std::snprintf(text, sizeof text, "%.0f MiB", bytes / double(1ull << 20));
  return text;
}

struct StartedThreads {
  int started = 0;  // threads that ran, besides the caller
  int error = 0;    // pthread_create's answer for the next one; 0 when all started
  size_t stack_bytes = 0;
};

// Starts `extra` threads with OpenMP's stack size, all alive at once as in an OpenMP team, then ends them.
StartedThreads start_threads(int extra) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (const std::optional<size_t> stack = openmp_stack_size()) pthread_attr_setstacksize(&attr, *stack);
  StartedThreads result;
  pthread_attr_getstacksize(&attr, &result.stack_bytes);

  struct Gate {
    std::mutex mutex;
    std::condition_variable opened;
    bool open = false;
  } gate;
  auto wait_at_gate = [](void* arg) -> void* {
    Gate& g = *static_cast<Gate*>(arg);
    std::unique_lock lock(g.mutex);
    g.opened.wait(lock, [&] { return g.open; });
    return nullptr;
  };
  std::vector<pthread_t> threads;
  threads.reserve(size_t(extra));
  for (int i = 0; i < extra; i++) {
    pthread_t thread;
    result.error = pthread_create(&thread, &attr, wait_at_gate, &gate);
    if (result.error != 0) break;
    threads.push_back(thread);
  }
  {
    std::lock_guard lock(gate.mutex);
    gate.open = true;
  }
  gate.opened.notify_all();
  for (pthread_t thread : threads) pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  result.started = int(threads.size());
  return result;
}

// The limits that bound thread creation, where they are set: "this process may map at most 6.0 GiB (ulimit -v)".
std::string thread_limits() {
  std::string text;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    text += "; this process may map at most " + mib(double(limit.rlim_cur)) + " (ulimit -v)";
  if (::getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    text += "; this user may have at most " + std::to_string(limit.rlim_cur) + " processes and threads (ulimit -u)";
  return text;
}

}  // namespace

void set_thread_count(int n) {
  if (n <= 0) return;
  // The largest count already started: libgomp keeps its threads, so a smaller or equal count needs no check.
  static int started = 1;
  if (n > started) {
    const StartedThreads probe = start_threads(n - 1);
    if (probe.error != 0)
      throw Error("train.threads: " + std::to_string(n) + " threads cannot run here: only " +
                  std::to_string(probe.started + 1) + " could start (" + std::strerror(probe.error) +
                  "). Each reserves a stack of " + mib(double(probe.stack_bytes)) +
                  " (OMP_STACKSIZE, else ulimit -s), " + mib(double(probe.stack_bytes) * n) + " for " +
                  std::to_string(n) + thread_limits() + "; allowed here: train.threads below " +
                  std::to_string(probe.started + 1) + ", leaving address space for the run itself (this machine has " +
                  std::to_string(omp_get_num_procs()) + " cores), or higher limits, or a smaller OMP_STACKSIZE");
    omp_set_num_threads(n);
    // OpenMP starts its threads now, while the ones above have just given their stacks back, rather than at the
    // first parallel loop, after the model and its buffers have taken more of the address space.
#pragma omp parallel num_threads(n)
    { (void)0; }
    started = n;
  }
  omp_set_num_threads(n);
}

}  // namespace canonlab
