#include "sweep/run_attempt.h"

#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "train/checkpoint.h"
#include "train/run_directory.h"
#include "train/stop_signals.h"
#include "io/json_read.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) { return read_text_if_exists(path.string()).value_or(""); }

// The last lines of a failed run's log, preferring the line that says "error:".
std::string failure_message(const fs::path& log_path) {
  const std::string text = read_text(log_path);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (auto cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);  // progress-bar redraws
    if (!line.empty()) lines.push_back(line);
    start = end + 1;
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (it->rfind("error:", 0) == 0) return *it;
  std::string tail;
  for (size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); i++) tail += (tail.empty() ? "" : " | ") + lines[i];
  return tail.empty() ? "(no output)" : tail;
}

nlohmann::json with_extra(nlohmann::json status, const nlohmann::json& extra) {
  if (extra.is_object())
    for (auto& [key, value] : extra.items()) status[key] = value;
  return status;
}

}  // namespace

RunDiskState inspect_run_dir(const std::string& run_dir, int steps) {
  const fs::path dir(run_dir);
  auto summary = parse_json_or_discarded(read_text(dir / "summary.json"));
  if (summary.is_object() && summary.contains("steps") && summary["steps"].is_number_integer() &&
      summary["steps"].get<int64_t>() == steps)
    return RunDiskState::finished;
  if (path_exists(dir / "checkpoints" / "latest.json", "cannot read run checkpoint pointer")) return RunDiskState::resumable;
  return RunDiskState::fresh;
}

int checkpoint_step(const std::string& run_dir) {
  try {
    const std::optional<LatestCheckpoint> latest = read_latest_checkpoint((fs::path(run_dir) / "checkpoints").string());
    return latest ? latest->step : 0;
  } catch (const Error&) {
    return 0;
  }
}

std::optional<int> latest_logged_step(const std::string& run_dir) {
  // Only a progress display: anything but a readable regular file shows no step. A directory in its place used
  // to open, report a size of -1 and ask for a string of 2^64 bytes.
  const fs::path path = fs::path(run_dir) / "metrics.jsonl";
  if (!path_status(path).is_regular_file()) return std::nullopt;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? std::streamoff(in.tellg()) : -1;
  if (size < 0) return std::nullopt;
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(size_t(size - from), '\0');
  in.read(tail.data(), std::streamsize(tail.size()));
  std::optional<int> step;
  size_t start = 0;
  while (start < tail.size()) {
    size_t end = tail.find('\n', start);
    if (end == std::string::npos) break;  // a line still being written
    auto j = parse_json_or_discarded(tail.substr(start, end - start));
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) step = int(j["step"].get<int64_t>());
    start = end + 1;
  }
  return step;
}

void write_status(const std::string& run_dir, nlohmann::json status) {
  status["time"] = std::time(nullptr);
  write_text_atomic((fs::path(run_dir) / "status.json").string(), status.dump(2) + "\n");
}

void mark_done_if_unmarked(const std::string& run_dir) {
  const auto status = parse_json_or_discarded(read_text(fs::path(run_dir) / "status.json"));
  if (!status.is_object() || status.value("state", "") != "done") write_status(run_dir, {{"state", "done"}, {"exit_code", 0}});
}

RunAttempt start_run_attempt(const std::string& run_dir, const std::string& run_yaml, int steps,
                             const std::string& executable, const nlohmann::json& extra, bool own_process_group) {
  const fs::path dir(run_dir);
  create_directories_at(dir, "cannot create run directory");
  const std::string config_path = (dir / "run.yaml").string();
  if (read_text(config_path) != run_yaml) write_text_atomic(config_path, run_yaml);
  const bool resume = inspect_run_dir(run_dir, steps) == RunDiskState::resumable;
  const int start_step = resume ? checkpoint_step(run_dir) : 0;
  std::vector<std::string> args = {"train", config_path, "--out", run_dir, "--quiet"};
  // Without a checkpoint, an earlier attempt that recorded metrics (failed or killed before its first checkpoint)
  // cannot be continued, and `train` refuses to replace it: --force moves its files to RUN_DIR/superseded/<time>/.
  // The run directory is this grid's run (the launcher checked its config.resolved.yaml).
  if (resume)
    args.push_back("--resume");
  else if (!earlier_run_results(run_dir).empty())
    args.push_back("--force");
  write_status(run_dir, with_extra({{"state", "running"}, {"resumed_from_step", start_step}}, extra));
  return {ChildProcess(executable, args, (dir / "train.log").string(), own_process_group), start_step,
          std::chrono::steady_clock::now()};
}

AttemptResult finish_run_attempt(const std::string& run_dir, int steps, const ChildExit& exit, double seconds,
                                 int forwarded_signal, const nlohmann::json& extra) {
  if (exit.ok() && inspect_run_dir(run_dir, steps) == RunDiskState::finished) {
    write_status(run_dir, with_extra({{"state", "done"}, {"exit_code", 0}, {"wall_s", seconds}}, extra));
    return {AttemptEnd::done, ""};
  }
  const bool graceful = exit.signal == 0 && exit.exit_code == kExitStoppedBySignal;
  if (graceful || (forwarded_signal != 0 && exit.signal == forwarded_signal)) {
    const std::string how = graceful ? "stopped by a signal, checkpoint written" : exit.describe();
    write_status(run_dir, with_extra({{"state", "interrupted"}, {"exit_code", exit.exit_code}, {"signal", exit.signal},
                                      {"checkpoint_step", checkpoint_step(run_dir)}, {"wall_s", seconds}},
                                     extra));
    return {AttemptEnd::interrupted, how};
  }
  const std::string error = exit.ok() ? "exited without writing summary.json" : failure_message(fs::path(run_dir) / "train.log");
  write_status(run_dir, with_extra({{"state", "failed"}, {"exit_code", exit.exit_code}, {"signal", exit.signal},
                                    {"error", error}, {"wall_s", seconds}},
                                   extra));
  return {AttemptEnd::failed, error};
}

}  // namespace canonlab
