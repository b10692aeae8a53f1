#include "sweep/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "engine/error.h"

extern char** environ;

namespace canonlab {

std::string ChildExit::describe() const {
  if (signal != 0) return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit code " + std::to_string(exit_code);
}

ChildProcess::ChildProcess(const std::string& executable, const std::vector<std::string>& args,
                           const std::string& log_path, bool own_process_group) {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_storage = {executable};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  CANONLAB_CHECK(log_fd >= 0, "cannot open log file '" + log_path + "': " + std::strerror(errno));
  const pid_t parent = ::getpid();

  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the sweep died between fork and prctl
    if (own_process_group) ::setpgid(0, 0);
    sigset_t none;                            // the sweep blocks signals to wait for them; training must not
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::execv(executable.c_str(), argv.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(log_fd);
  CANONLAB_CHECK(pid_ > 0, std::string("cannot start a run: fork failed: ") + std::strerror(fork_errno));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    terminate();
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) terminate();
}

std::optional<ChildExit> ChildProcess::poll() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return std::nullopt;
  pid_ = -1;
  ChildExit e;
  if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  return e;
}

void ChildProcess::terminate() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  ::kill(pid_, SIGCONT);  // a stopped trainer (Ctrl-Z, a debugger let go) takes its SIGTERM only once it runs again
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

namespace {

// Reads two pipes to their ends without one filling up while the other is read (poll).
void drain(int out_fd, int err_fd, std::string& out, std::string& err) {
  std::array<pollfd, 2> fds = {pollfd{out_fd, POLLIN, 0}, pollfd{err_fd, POLLIN, 0}};
  std::array<std::string*, 2> targets = {&out, &err};
  int open_fds = 2;
  std::array<char, 4096> buffer;
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < fds.size(); i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        targets[i]->append(buffer.data(), size_t(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv) {
  CANONLAB_CHECK(!argv.empty(), "run_command needs a program");
  std::vector<std::string> storage = argv;
  std::vector<char*> args;
  for (auto& s : storage) args.push_back(s.data());
  args.push_back(nullptr);
  std::array<int, 2> out_pipe{}, err_pipe{};
  CANONLAB_CHECK(::pipe2(out_pipe.data(), O_CLOEXEC) == 0 && ::pipe2(err_pipe.data(), O_CLOEXEC) == 0,
                 "cannot run " + argv[0] + ": pipe failed: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = -1;
  const int spawn_error = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  CommandResult result;
  if (spawn_error == 0) {
    drain(out_pipe[0], err_pipe[0], result.output, result.errors);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.started = true;
    if (WIFEXITED(status)) result.exit.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.exit.signal = WTERMSIG(status);
  } else {
    result.errors = std::strerror(spawn_error);
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  return result;
}

}  // namespace canonlab
