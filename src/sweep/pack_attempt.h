#pragma once
// One attempt at training a pack of a sweep's runs in one process (`canonlab train-pack`, train/pack.h), read back
// run by run as if each had been its own `canonlab train` child (run_attempt.h): the same run.yaml, status.json
// states and run directories, so `--status`, `report`, resume and the Slurm launcher see no difference. The pack's
// own output goes to SWEEP_DIR/packs/<pack>.log, and its report of how each run ended to <pack>.json beside it.
#include <chrono>
#include <string>
#include <vector>

#include "sweep/child_process.h"
#include "sweep/run_attempt.h"
#include "sweep/sweep_spec.h"

namespace canonlab {

// `runs` grouped into packs, as positions in `runs`: runs with equal pack_signature (train/pack.h), in their order,
// at most `pack_size` per pack (0: a whole group per pack).
std::vector<std::vector<size_t>> group_into_packs(const std::vector<const SweepRun*>& runs, int pack_size);

// --pack auto on the CPU: the runs that fit in half the memory available now, by their estimated peak (at least 1).
int auto_pack_size(const RunConfig& config);

struct PackAttempt {
  ChildProcess process;
  std::string name, log_path, report_path;
  std::vector<int> start_steps;  // per run: the checkpoint it resumes from, or 0
  std::chrono::steady_clock::time_point started;
};

// Writes each run's run.yaml, marks them running (with "pack": name, plus `extra`) and starts
// `executable train-pack RUN_DIR... --width W --report SWEEP_DIR/packs/<name>.json` (width 0: as many as the CPUs the
// process may use allow). own_process_group: see ChildProcess.
PackAttempt start_pack_attempt(const std::string& sweep_dir, const std::vector<std::string>& run_dirs,
                               const std::vector<std::string>& run_yamls, const std::vector<int>& steps,
                               const std::string& executable, int width,
                               const nlohmann::json& extra = nlohmann::json::object(), bool own_process_group = false);

// How each run of an ended pack ended, recorded in its status.json as finish_run_attempt does. A pack that ended
// without its report (killed, crashed) fails its unfinished runs with the pack's exit, naming its log, unless that
// exit is the forwarded_signal (run_attempt.h). `extra` goes into each status.json.
std::vector<AttemptResult> finish_pack_attempt(const PackAttempt& attempt, const std::vector<std::string>& run_dirs,
                                               const std::vector<int>& steps, const ChildExit& exit, double seconds,
                                               int forwarded_signal = 0,
                                               const nlohmann::json& extra = nlohmann::json::object());

}  // namespace canonlab
