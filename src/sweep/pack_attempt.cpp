#include "sweep/pack_attempt.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "train/pack.h"
#include "train/resource_estimate.h"
#include "train/run_directory.h"
#include "train/stop_signals.h"
#include "io/json_read.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {
// What `canonlab train` exits with when a run fails with an error (a non-finite loss, bad input): a packed run that
// failed is recorded with it, as if it had been trained alone.
constexpr int kExitRunFailed = 2;
}  // namespace

std::vector<std::vector<size_t>> group_into_packs(const std::vector<const SweepRun*>& runs, int pack_size) {
  std::vector<std::string> signatures;  // in order of first appearance
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < runs.size(); i++) {
    const std::string signature = pack_signature(runs[i]->config);
    if (!groups.count(signature)) signatures.push_back(signature);
    groups[signature].push_back(i);
  }
  std::vector<std::vector<size_t>> packs;
  for (const std::string& signature : signatures) {
    const std::vector<size_t>& group = groups[signature];
    const size_t size = pack_size > 0 ? size_t(pack_size) : group.size();
    for (size_t first = 0; first < group.size(); first += size)
      packs.emplace_back(group.begin() + std::ptrdiff_t(first),
                         group.begin() + std::ptrdiff_t(std::min(group.size(), first + size)));
  }
  return packs;
}

int auto_pack_size(const RunConfig& config) {
  const double peak = estimate_resources(config, Purpose::train).peak_bytes;
  const double available = available_memory_bytes();
  if (available <= 0 || peak <= 0) return 1;
  return std::max(1, int(0.5 * available / peak));
}

PackAttempt start_pack_attempt(const std::string& sweep_dir, const std::vector<std::string>& run_dirs,
                               const std::vector<std::string>& run_yamls, const std::vector<int>& steps,
                               const std::string& executable, int width, const nlohmann::json& extra,
                               bool own_process_group) {
  CANONLAB_CHECK(!run_dirs.empty(), "a pack needs at least one run");
  const fs::path packs = fs::path(sweep_dir) / "packs";
  create_directories_at(packs, "sweep directory (--out): cannot create");
  const std::string name = "pack-" + fs::path(run_dirs.front()).filename().string();
  const std::string log_path = (packs / (name + ".log")).string(), report_path = (packs / (name + ".json")).string();
  std::error_code ec;
  fs::remove(report_path, ec);  // an earlier attempt's report must not be read as this one's
  std::vector<std::string> args = {"train-pack"};
  std::vector<int> start_steps;
  for (size_t i = 0; i < run_dirs.size(); i++) {
    create_directories_at(run_dirs[i], "cannot create run directory");
    const std::string config_path = run_dirs[i] + "/run.yaml";
    if (read_text_if_exists(config_path).value_or("") != run_yamls[i]) write_text_atomic(config_path, run_yamls[i]);
    const bool resume = inspect_run_dir(run_dirs[i], steps[i]) == RunDiskState::resumable;
    start_steps.push_back(resume ? checkpoint_step(run_dirs[i]) : 0);
    nlohmann::json status = {{"state", "running"}, {"resumed_from_step", start_steps.back()}, {"pack", name}};
    for (auto& [key, value] : extra.items()) status[key] = value;
    write_status(run_dirs[i], status);
    args.push_back(run_dirs[i]);
  }
  args.insert(args.end(), {"--width", std::to_string(width), "--report", report_path});
  return {ChildProcess(executable, args, log_path, own_process_group), name, log_path, report_path, start_steps,
          std::chrono::steady_clock::now()};
}

std::vector<AttemptResult> finish_pack_attempt(const PackAttempt& attempt, const std::vector<std::string>& run_dirs,
                                               const std::vector<int>& steps, const ChildExit& exit, double seconds,
                                               int forwarded_signal, const nlohmann::json& extra) {
  const nlohmann::json report =
      parse_json_or_discarded(read_text_if_exists(attempt.report_path).value_or(""));
  std::map<std::string, std::string> ends;  // run_dir -> done | failed | interrupted
  if (report.is_array())
    for (const nlohmann::json& r : report)
      if (r.is_object() && r.value("run_dir", nlohmann::json()).is_string() && r.value("end", nlohmann::json()).is_string())
        ends[r["run_dir"].get<std::string>()] = r["end"].get<std::string>();
  std::vector<AttemptResult> results;
  for (size_t i = 0; i < run_dirs.size(); i++) {
    ChildExit run_exit = exit;  // no report: the pack's own exit speaks for every run
    const auto end = ends.find(run_dirs[i]);
    if (end != ends.end())
      run_exit = end->second == "done" ? ChildExit{0, 0}
                 : end->second == "interrupted" ? ChildExit{kExitStoppedBySignal, 0} : ChildExit{kExitRunFailed, 0};
    else if (inspect_run_dir(run_dirs[i], steps[i]) != RunDiskState::finished &&
             !(forwarded_signal != 0 && exit.signal == forwarded_signal)) {
      if (run_exit.ok()) run_exit = ChildExit{kExitRunFailed, 0};
      std::ofstream(run_dirs[i] + "/train.log", std::ios::app)
          << "error: its pack " << attempt.name << " ended (" << exit.describe() << ") without saying how this run "
          << "ended; see " << attempt.log_path << "\n";
    }
    nlohmann::json status_extra = extra;
    status_extra["pack"] = attempt.name;
    results.push_back(finish_run_attempt(run_dirs[i], steps[i], run_exit, seconds, forwarded_signal, status_extra));
  }
  return results;
}

}  // namespace canonlab
