#include "sweep/slurm_queue.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/strict_number.h"
#include "sweep/child_process.h"
#include "io/json_read.h"

namespace canonlab {

namespace fs = std::filesystem;

std::string submission_path(const std::string& sweep_dir, int number) {
  return (fs::path(sweep_dir) / "slurm" / ("submit-" + std::to_string(number) + ".json")).string();
}

std::string submission_script_path(const std::string& sweep_dir, int number) {
  return (fs::path(sweep_dir) / "slurm" / ("submit-" + std::to_string(number) + ".sh")).string();
}

SlurmSubmission read_submission(const std::string& path) {
  const std::optional<std::string> text = read_text_if_exists(path, "Slurm submission file");
  CANONLAB_CHECK(text, "cannot read Slurm submission file '" + path + "'");
  const auto j = parse_json_or_discarded(*text);
  auto bad = [&](const std::string& what) {
    return Error("Slurm submission file '" + path + "' " + what + "; it is written by `canonlab sweep --launcher slurm` "
                 "(format " + kSlurmSubmissionFormat + ")");
  };
  if (!j.is_object()) throw bad("is not a JSON object");
  if (j.value("format", "") != kSlurmSubmissionFormat) throw bad("has format " + (j.contains("format") ? brief(j["format"]) : "(none)"));
  if (!j.contains("sweep_dir") || !j["sweep_dir"].is_string() || !j.contains("job_id") || !j["job_id"].is_string() ||
      !j.contains("tasks") || !j["tasks"].is_array())
    throw bad("lacks sweep_dir, job_id or tasks");
  SlurmSubmission s;
  s.sweep_dir = j["sweep_dir"];
  s.job_id = j["job_id"];
  s.runs_per_task = j.value("runs_per_task", 1);
  s.pack = j.value("pack", false);
  for (const auto& task : j["tasks"]) {
    if (!task.is_array() || task.empty()) throw bad("has a task that is not a non-empty list of runs");
    std::vector<SlurmTaskRun> runs;
    for (const auto& run : task) {
      if (!run.is_object() || !run.contains("name") || !run["name"].is_string() || !run.contains("steps") ||
          !run["steps"].is_number_integer())
        throw bad("has a run without name or steps");
      const std::string name = run["name"];
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        throw bad("names a run '" + name + "' that is not a directory name");
      runs.push_back({name, run["steps"].get<int>()});
    }
    s.tasks.push_back(std::move(runs));
  }
  const std::string stem = fs::path(path).stem().string();  // "submit-N"
  s.number = stem.starts_with("submit-") ? parse_integer<int>(stem.substr(7)).value_or(0) : 0;
  return s;
}

void write_submission(const std::string& path, const SlurmSubmission& s) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& task : s.tasks) {
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& run : task) runs.push_back({{"name", run.name}, {"steps", run.steps}});
    tasks.push_back(runs);
  }
  const nlohmann::json j = {{"format", kSlurmSubmissionFormat}, {"sweep_dir", s.sweep_dir}, {"job_id", s.job_id},
                            {"runs_per_task", s.runs_per_task}, {"pack", s.pack}, {"tasks", tasks}};
  create_directories_at(fs::path(path).parent_path(), "sweep directory (--out): cannot create");
  write_text_atomic(path, j.dump(1) + "\n");
}

std::vector<SlurmSubmission> read_submissions(const std::string& sweep_dir) {
  std::vector<SlurmSubmission> found;
  for (const fs::path& path : directory_listing(fs::path(sweep_dir) / "slurm", "sweep directory (--out): cannot read")) {
    const std::string name = path.filename().string();
    if (!name.starts_with("submit-") || path.extension() != ".json") continue;
    if (!parse_integer<int>(path.stem().string().substr(7))) continue;
    SlurmSubmission s = read_submission(path.string());
    if (!s.job_id.empty()) found.push_back(std::move(s));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.number < b.number; });
  return found;
}

SlurmQueue parse_squeue_output(const std::string& text) {
  SlurmQueue queue;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, state;
    if (fields >> id >> state) queue[id] = state;
  }
  return queue;
}

std::optional<SlurmQueue> query_slurm_queue(std::string& why_not) {
  passwd entry{};
  passwd* user = nullptr;
  std::vector<char> buffer(16384);
  ::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &user);
  const std::string user_name = user ? user->pw_name : std::to_string(::getuid());
  const CommandResult r =
      run_command({"squeue", "--noheader", "--array", "--user=" + user_name, "--format=%i %T"});
  if (!r.started) {
    why_not = "squeue cannot be run (" + r.errors + ")";
    return std::nullopt;
  }
  if (!r.exit.ok()) {
    std::string message = r.errors.empty() ? r.output : r.errors;
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    why_not = "squeue failed (" + r.exit.describe() + "): " + message;
    return std::nullopt;
  }
  return parse_squeue_output(r.output);
}

bool is_running_state(const std::string& state) {
  static const std::set<std::string> running = {"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT",
                                                "SUSPENDED", "RESIZING"};
  return running.count(state) > 0;
}

std::map<std::string, QueuedRun> queued_runs(const std::vector<SlurmSubmission>& submissions, const SlurmQueue& queue) {
  std::map<std::string, QueuedRun> runs;
  for (const SlurmSubmission& s : submissions) {
    for (size_t t = 0; t < s.tasks.size(); t++) {
      const std::string task_id = s.job_id + "_" + std::to_string(t);
      auto it = queue.find(task_id);
      if (it == queue.end()) continue;
      for (const SlurmTaskRun& run : s.tasks[t]) {
        auto [entry, inserted] = runs.try_emplace(run.name, QueuedRun{task_id, it->second});
        if (!inserted && is_running_state(it->second)) entry->second = {task_id, it->second};  // running wins
      }
    }
  }
  return runs;
}

}  // namespace canonlab
