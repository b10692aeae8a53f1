#include "io/hf/remote_code.h"

#include <string>

#include "engine/error.h"

namespace canonlab {

namespace {

// The module stem of a Canon format's files; nullptr for stock llama.
const char* module_stem(HfFormat f) {
  switch (f) {
    case HfFormat::llama: return nullptr;
    case HfFormat::llama_canon: return "llama_canon";
    case HfFormat::gla_canon: return "gla_canon";
    case HfFormat::gdn_canon: return "gated_deltanet_canon";
    default: return "mamba2_canon";
  }
}

HfRemoteFile embedded(const std::string& name) {
  for (const HfRemoteFile& file : hf_remote_code_files())
    if (file.name == name) return file;
  // Only a build that lost a file of src/io/hf/remote_code/ gets here.
  throw Error("the Hugging Face model code file '" + name + "' is not embedded in this canonlab build (src/io/hf/remote_code/)");
}

}  // namespace

std::vector<HfRemoteFile> hf_remote_code_for(HfFormat f) {
  const char* stem = module_stem(f);
  if (!stem) return {};
  return {embedded("configuration_" + std::string(stem) + ".py"), embedded("modeling_" + std::string(stem) + ".py"),
          embedded("canonlab_hf_layers.py")};
}

nlohmann::json hf_auto_map(HfFormat f) {
  const char* stem = module_stem(f);
  if (!stem) return nullptr;
  const std::string type = hf_format_name(f);  // the class names start with the model_type
  return {{"AutoConfig", "configuration_" + std::string(stem) + "." + type + "Config"},
          {"AutoModelForCausalLM", "modeling_" + std::string(stem) + "." + type + "ForCausalLM"}};
}

}  // namespace canonlab
