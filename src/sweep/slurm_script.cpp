#include "sweep/slurm_script.h"

#include <algorithm>
#include <sstream>

#include "engine/error.h"

namespace canonlab {

namespace {

// sbatch reads an #SBATCH line's value with double quotes around it (so spaces are fine) but has no escape for
// a quote or a line break inside, and a backslash in an output pattern switches Slurm's %-substitution off.
void check_sbatch_path(const std::string& path, const std::string& what) {
  const bool unsafe = std::ranges::any_of(path, [](char c) { return c == '"' || c == '\\' || c == '\n' || c == '\r'; });
  if (unsafe)
    throw Error(what + " '" + path + "' contains a '\"', a backslash or a line break, which an #SBATCH line cannot "
                "carry; use a directory without them (--out)");
}

// Slurm expands %A, %a, ... in --output; a literal '%' in the directory is written %%.
std::string escape_output_pattern(const std::string& path) {
  std::string out;
  for (char c : path) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

}  // namespace

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string make_sbatch_script(const SlurmScriptInputs& in) {
  CANONLAB_CHECK(in.tasks >= 1, "a Slurm submission needs at least one array task");
  CANONLAB_CHECK(in.executable.find_first_of("\n\r") == std::string::npos &&
                     in.submission_file.find_first_of("\n\r") == std::string::npos,
                 "the canonlab binary or sweep directory path contains a line break: '" + in.executable + "', '" +
                     in.submission_file + "'");
  const SlurmSettings& s = in.settings;
  std::ostringstream out;
  out << "#!/bin/bash\n"
      << "# canonlab sweep " << in.sweep_name << ": " << in.runs << " run(s) in " << in.tasks << " array task(s), "
      << s.runs_per_task << " per task, written by `canonlab sweep --launcher slurm`.\n"
      << "# Each task trains its runs as the local launcher does, in the sweep directory (docs/cluster.md).\n"
      << "# The same command submits what is left; `canonlab sweep --status DIR` shows where every run is.\n";
  auto directive = [&](const std::string& line) { out << "#SBATCH " << line << "\n"; };
  directive("--job-name=canonlab-" + in.sweep_name);
  directive("--array=0-" + std::to_string(in.tasks - 1) + (s.max_running > 0 ? "%" + std::to_string(s.max_running) : ""));
  directive("--ntasks=1");
  directive("--cpus-per-task=" + std::to_string(in.cpus_per_task));
  if (!s.partition.empty()) directive("--partition=" + s.partition);
  if (!s.account.empty()) directive("--account=" + s.account);
  if (!s.qos.empty()) directive("--qos=" + s.qos);
  if (!s.time.empty()) directive("--time=" + s.time);
  if (!s.mem.empty()) directive("--mem=" + s.mem);
  if (s.gpus_per_run > 0) directive("--gres=gpu:" + std::to_string(s.gpus_per_run));
  directive("--signal=B:USR1@" + std::to_string(s.signal_lead));
  directive("--requeue");
  directive("--open-mode=append");
  check_sbatch_path(in.log_dir, "the Slurm log directory");
  directive("--output=\"" + escape_output_pattern(in.log_dir) + "/%A_%a.out\"");
  for (const std::string& line : s.sbatch) directive(line);
  // exec: the worker becomes the batch shell, so Slurm's B:USR1 warning reaches it directly.
  out << "exec " << shell_quote(in.executable) << " sweep-task " << shell_quote(in.submission_file)
      << " \"$SLURM_ARRAY_TASK_ID\"\n";
  return out.str();
}

}  // namespace canonlab
