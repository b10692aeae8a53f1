#pragma once
// A sweep file: one base config, overrides shared by every run, and axes whose cartesian product is the grid.
//
//   name: ks-placement-4L-9seeds          # optional; default: the file's stem
//   description: ...                      # optional free text, copied into the report
//   base: ../E1-Bk0.yaml                  # the config every run starts from (relative to this file)
//   set:                                  # optional: key paths applied to every run, like --set
//     task.n_symbols: 8
//   axes:
//     - name: layer                       # optional; default: the key's last part ("layers")
//       key: model.attention.key_shift.layers
//       values: [[0], [1], [2], [3]]
//       labels: [L0, L1, L2, L3]          # optional; default: the values written out
//     - key: seed                         # `seed` is short for train.seed
//       values: [0, 1, 2]
//     - key: train.lr
//       range: {start: 1, stop: 4, step: 1}    # Python-style: stop is excluded; or range: [start, stop(, step)]
//     - name: shape                       # a zipped axis: several keys move together
//       zip:
//         - {key: model.d_model, values: [64, 128]}
//         - {key: model.n_heads, values: [2, 4]}
//       labels: [small, big]
//   report: {pivot: [seed, layer], metric: global_ipmr, threshold: 0.5, compare: ["layer=L0:layer=L1"]}
//   slurm:                                # optional: resources for `canonlab sweep --launcher slurm` (docs/cluster.md)
//     partition: gpu                      # partition, account, qos: names as Slurm knows them
//     account: proj42
//     qos: normal
//     time: "4:00:00"                     # each array task's limit, in a Slurm time format
//     mem: 8G                             # --mem of each array task
//     cpus_per_run: 4                     # --cpus-per-task and train.threads (--threads-per-run)
//     gpus_per_run: 1                     # --gres=gpu:1
//     runs_per_task: 2                    # runs trained one after the other in one array task
//     max_running: 10                     # array tasks at once (--array=0-N%10)
//     signal_lead: 120                    # seconds before the time limit that SIGUSR1 asks for a checkpoint
//     sbatch: ["--constraint=a100"]       # further #SBATCH lines, as written
//
// Every grid point becomes a run named after its axis values in axis order ("layer=L0__seed=0"), trained from
// the base config with the shared overrides and then the axis values applied.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace canonlab {

struct SweepAxis {
  std::string name;
  std::vector<std::string> keys;                      // one key, or several for a zipped axis
  std::vector<std::string> labels;                    // one per value; safe in a directory name
  std::vector<std::vector<std::string>> yaml_values;  // [value index][key index], as YAML flow text
  std::string origin;                                 // "file:line" for errors
};

struct SweepRun {
  std::string name;                           // "layer=L0__seed=0"
  std::map<std::string, std::string> labels;  // axis name -> label
  RunConfig config;
};

// The `slurm:` section, or the flags of `canonlab sweep --launcher slurm` (flags win). It is not part of sweep.json:
// changing resources never makes a sweep directory "a different sweep". Empty or 0 means the cluster's default.
struct SlurmSettings {
  std::string partition, account, qos, time, mem;
  int cpus_per_run = 0;   // 0: --threads-per-run (default 1)
  int gpus_per_run = 0;   // --gres=gpu:G when > 0
  int runs_per_task = 1;  // runs one after the other in one array task
  int max_running = 0;    // the array's %P throttle; 0: no limit
  int signal_lead = 120;  // --signal=B:USR1@signal_lead (seconds before the time limit)
  std::vector<std::string> sbatch;  // extra "#SBATCH <line>" lines
};

// The keys of the slurm: section; flags are the same names with '-' ("--runs-per-task").
inline const char* const kSlurmKeys =
    "partition, account, qos, time, mem, cpus_per_run, gpus_per_run, runs_per_task, max_running, signal_lead, sbatch";

// Sets one key of `settings` from its text (a list key such as sbatch gains one line). Returns what is wrong
// ("'1h' is not a Slurm time; allowed: ...") without saying where: the caller names the file and line or the flag.
std::optional<std::string> set_slurm_setting(SlurmSettings& settings, const std::string& key, const std::string& value);

struct SweepSpec {
  std::string name, description, source_path, base_path;
  std::vector<ConfigOverride> shared;  // the `set:` section
  std::vector<SweepAxis> axes;
  nlohmann::json report = nlohmann::json::object();  // defaults for `canonlab report`, passed through
  SlurmSettings slurm;                               // the `slurm:` section (defaults when absent)
};

// Parses and checks a sweep file; errors name the file, line and key.
SweepSpec load_sweep_spec(const std::string& path);

// Every grid point, first axis slowest. Each run's config is loaded, overridden and validated here, so a bad
// value anywhere in the grid is reported before anything runs. threads_per_run goes into train.threads.
std::vector<SweepRun> expand_sweep(const SweepSpec& spec, int threads_per_run);

}  // namespace canonlab
