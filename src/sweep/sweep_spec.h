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
//
// Every grid point becomes a run named after its axis values in axis order ("layer=L0__seed=0"), trained from
// the base config with the shared overrides and then the axis values applied.
#include <map>
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

struct SweepSpec {
  std::string name, description, source_path, base_path;
  std::vector<ConfigOverride> shared;  // the `set:` section
  std::vector<SweepAxis> axes;
  nlohmann::json report = nlohmann::json::object();  // defaults for `canonlab report`, passed through
};

// Parses and checks a sweep file; errors name the file, line and key.
SweepSpec load_sweep_spec(const std::string& path);

// Every grid point, first axis slowest. Each run's config is loaded, overridden and validated here, so a bad
// value anywhere in the grid is reported before anything runs. threads_per_run goes into train.threads.
std::vector<SweepRun> expand_sweep(const SweepSpec& spec, int threads_per_run);

}  // namespace canonlab
