#pragma once
// Loading, validating, resolving and writing RunConfig. Every entry point ends in resolve_and_validate, so a
// RunConfig that came out of this header is explicit (no "0 = derived" sentinels left where a value can be
// derived) and consistent. All failures throw canonlab::Error with the key path, the bad value and what is
// allowed. The key table behind all of this lives in config/schema.cpp; docs/config.md is generated from it.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.h"

namespace canonlab {

// Reads a YAML file (following `base:` chains, paths relative to the including file), applies
// `--set key.path=value` overrides in order, then resolves and validates.
RunConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides);

// One value to apply at a key path, as YAML text ("8", "[0, 2]", "{kind: gelu}"), and where it came from so
// an error can point there ("sweep.yaml:12: axis 'layer'"). Sweeps build their runs from these.
struct ConfigOverride {
  std::string path, yaml_value, origin;
};
RunConfig load_config_with(const std::string& yaml_path, const std::vector<ConfigOverride>& overrides);

// Same from YAML text; a `base:` in the text is resolved relative to the current directory.
RunConfig config_from_yaml_string(const std::string& text, const std::vector<std::string>& overrides = {});

// The resolved config as YAML: every key, in schema order, nested as in the struct. Loading it back gives the
// same config (and the same text).
std::string config_to_yaml(const RunConfig& config);

// Nested JSON object with the same shape as the YAML; used in checkpoint metadata. Round-trips exactly.
nlohmann::json config_to_json(const RunConfig& config);
RunConfig config_from_json(const nlohmann::json& json);

// Fills derived values (vocab_size, max_seq_len, rope_dim, mlp.hidden_dim, data_seed) and checks every range,
// allowed set and cross-key rule. Idempotent.
void resolve_and_validate(RunConfig& config);

// The largest value a numeric key allows (model.d_model: 16384; +inf without a bound), for importers that refuse a
// foreign key's value under its own name before it becomes canonlab's (io/hf/hf_keys.h).
double config_key_upper_limit(std::string_view path);

// Markdown table of every key (path, type, default, allowed, description); pasted into docs/config.md.
std::string config_reference_markdown();

}  // namespace canonlab
