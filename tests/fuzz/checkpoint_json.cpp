// Fuzz target: checkpoint-metadata JSON text -> nlohmann::json::parse + canonlab::config_from_json, which is what
// read_model_config (src/train/checkpoint.cpp) does with a checkpoint's "canonlab.config" metadata.
//
// Contract: text that is not JSON is rejected by the parse (read_model_config turns that into canonlab::Error);
// JSON that is not a valid config makes config_from_json throw canonlab::Error and nothing else (config.h: "All
// failures throw canonlab::Error"). A config that loads must round-trip through config_to_json, both as a JSON
// value and as the text a checkpoint stores.
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace canonlab;
  const nlohmann::json json = nlohmann::json::parse(data, data + size, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  RunConfig config;
  try {
    config = config_from_json(json);
  } catch (const Error&) {
    return 0;
  }
  const std::string resolved = config_to_yaml(config);
  const nlohmann::json written = config_to_json(config);
  try {
    fuzz::expect(config_to_yaml(config_from_json(written)) == resolved,
                 "config_to_json of a loaded config loads back to a different config:\n" + resolved);
    fuzz::expect(config_to_yaml(config_from_json(nlohmann::json::parse(written.dump()))) == resolved,
                 "the stored text of config_to_json loads back to a different config:\n" + resolved);
  } catch (const Error& e) {
    fuzz::fail(std::string("a loaded config does not load back from its JSON: ") + e.what() + "\n" + resolved);
  }
  return 0;
}
