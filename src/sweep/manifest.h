#pragma once
// SWEEP_DIR/sweep.json: what a sweep directory was made from (axes, and every run's full config), read by
// `canonlab report` and compared on every re-run so that a changed base config or axis is never mixed into
// old results silently. Format "canonlab-sweep/1":
//   {"format", "name", "description", "source", "axes": [{"name", "keys", "labels"}], "report": {...},
//    "runs": [{"name", "dir", "axes": {axis: label}, "config": {...}}]}
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sweep/sweep_spec.h"

namespace canonlab {

inline constexpr const char* kSweepFormat = "canonlab-sweep/1";

nlohmann::json make_sweep_manifest(const SweepSpec& spec, const std::vector<SweepRun>& runs);

// The first way `now` differs from `before` in axes or runs, as a sentence ("run 'seed=1': train.lr was 0.001,
// now 0.002"), or nothing when the sweep is the same. Name, description and report defaults may change freely.
std::optional<std::string> sweep_difference(const nlohmann::json& before, const nlohmann::json& now);

// The first way a run's config `now` differs from `before` (config_to_json form), or nothing. A key that `before`
// lacks counts as unchanged when `now` holds its default: a sweep directory written before canonlab gained the key
// trained with that default's behaviour, so newer binaries resume and report it.
std::optional<std::string> config_difference(const nlohmann::json& before, const nlohmann::json& now);

}  // namespace canonlab
