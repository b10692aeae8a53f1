// Fuzz target: YAML config text -> canonlab::config_from_yaml_string (src/config/config.h), as `canonlab train`
// loads a config file. Comment lines "#set key.path=value" in the input are also passed as --set overrides, so
// the same input exercises the override parser; YAML ignores them. A `base:` in the text resolves against the
// working directory, which scripts/fuzz.sh makes a scratch copy of configs/ (so `base: E1-Bk0.yaml` loads).
//
// Contract: canonlab::Error is the only way to reject an input. A config that loads must round-trip as
// config.h promises: its resolved YAML loads back to the same YAML, and so does its checkpoint JSON.
#include <sstream>

#include "config/config.h"
#include "engine/error.h"
#include "fuzz_support.h"

namespace {

std::vector<std::string> set_lines(const std::string& text) {
  std::vector<std::string> overrides;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("#set ")) overrides.push_back(line.substr(5));
  return overrides;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace canonlab;
  const std::string text = fuzz::as_text(data, size);
  RunConfig config;
  try {
    config = config_from_yaml_string(text, set_lines(text));
  } catch (const Error&) {
    return 0;
  }
  const std::string resolved = config_to_yaml(config);
  try {
    fuzz::expect(config_to_yaml(config_from_yaml_string(resolved)) == resolved,
                 "the resolved YAML of a loaded config loads back to a different config:\n" + resolved);
    fuzz::expect(config_to_yaml(config_from_json(config_to_json(config))) == resolved,
                 "the checkpoint JSON of a loaded config loads back to a different config:\n" + resolved);
  } catch (const Error& e) {
    fuzz::fail(std::string("a loaded config does not load back: ") + e.what() + "\n" + resolved);
  }
  return 0;
}
