#pragma once
// Internal to src/config: writing parsed YAML values into a RunConfig through the key table.
#include <string>

#include <yaml-cpp/yaml.h>

#include "config/run_config.h"

namespace canonlab::config_detail {

// Where the values being applied came from, so errors can point at them.
struct Origin {
  std::string name;  // file path, "--set k=v", "config JSON"
  bool has_lines;    // YAML marks are meaningful (a file or text), so errors say file:line
};

// Applies one top-level mapping (model/task/train/probe sections, canon_config alias) over `config`.
// A `base:` key is accepted and skipped only when `base_handled` (the caller loaded the base already).
void apply_document(RunConfig& config, const YAML::Node& root, const Origin& origin, bool base_handled);

// Applies one value at a key path (leaf or section) over `config`; used by --set.
void apply_at_path(RunConfig& config, const std::string& path, const YAML::Node& value, const Origin& origin);

}  // namespace canonlab::config_detail
