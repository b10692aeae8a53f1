#pragma once
// Starting the canonlab binary in the background with extra environment (CANONLAB_PAUSE_AT, train/phases.h), and
// waiting for states a test can observe: a process stopped at a phase, or its exit. The only time limits here are
// guards against a hang, generous enough never to decide a verdict on a working build.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace canonlab::test_support {

// The canonlab binary with `args`, environment = ours plus `env` ("KEY=value", overriding), stdout and stderr to
// log_path. Returns its pid, or -1.
inline pid_t spawn_canonlab(const std::vector<std::string>& args, const std::filesystem::path& log_path,
                            const std::vector<std::string>& env = {}) {
  std::vector<std::string> storage = {CANONLAB_BINARY};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = env;
  for (char** e = environ; *e != nullptr; e++) {
    const std::string entry = *e;
    bool overridden = false;
    for (const std::string& extra : env)
      overridden = overridden || entry.compare(0, extra.find('=') + 1, extra, 0, extra.find('=') + 1) == 0;
    if (!overridden) env_storage.push_back(entry);
  }
  std::vector<char*> envp;
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, CANONLAB_BINARY, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Blocks until our child `pid` stops (true) or ends (false; *exit_code then holds its exit code, or -signal).
inline bool wait_until_stopped(pid_t pid, int* exit_code = nullptr) {
  int status = 0;
  while (::waitpid(pid, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
  if (WIFSTOPPED(status)) return true;
  if (exit_code) *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return false;
}

// Blocks until our child `pid` ends: its exit code, or -signal.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// The state letter of /proc/PID/stat (R, S, T, Z, ...), or 0 when the process is gone.
inline char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

// Processes (not ours to wait for: a sweep's trainers, mpirun's ranks) whose command line mentions `needle`.
inline std::vector<pid_t> processes_mentioning(const std::string& needle) {
  std::vector<pid_t> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

// Waits until `count` processes mentioning `needle` are stopped (state T) and returns them; empty after `guard`
// (a hang: the phase was never reached).
inline std::vector<pid_t> wait_for_stopped_processes(const std::string& needle, size_t count = 1,
                                                     std::chrono::seconds guard = std::chrono::seconds(300)) {
  const auto give_up = std::chrono::steady_clock::now() + guard;
  while (std::chrono::steady_clock::now() < give_up) {
    std::vector<pid_t> stopped;
    for (pid_t pid : processes_mentioning(needle))
      if (process_state(pid) == 'T') stopped.push_back(pid);
    if (stopped.size() >= count) return stopped;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

}  // namespace canonlab::test_support
