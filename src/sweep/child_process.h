#pragma once
// One training run as a child process: its own address space, so a crash or a NaN stop in one run cannot take
// the others down, and a killed sweep takes its children with it (PR_SET_PDEATHSIG).
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace canonlab {

struct ChildExit {
  int exit_code = -1;  // when it exited normally
  int signal = 0;      // when a signal ended it
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string describe() const;
};

class ChildProcess {
 public:
  // Starts `executable args...` with stdout and stderr appended to log_path. With own_process_group the child
  // leads a process group of its own, so signals sent to the parent's group (Slurm's scancel and time limit
  // under proctrack/pgid) reach it only through the parent, once.
  ChildProcess(const std::string& executable, const std::vector<std::string>& args, const std::string& log_path,
               bool own_process_group = false);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();  // terminates and reaps a child that is still running

  // Non-blocking: the exit status once the child has ended.
  std::optional<ChildExit> poll();
  void terminate();  // SIGTERM, then wait
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// A short external command (sbatch, squeue, scontrol) run to its end, found on PATH, with stdin from /dev/null.
struct CommandResult {
  bool started = false;  // false: not found or not executable
  ChildExit exit;
  std::string output;  // stdout
  std::string errors;  // stderr
};
CommandResult run_command(const std::vector<std::string>& argv);

}  // namespace canonlab
