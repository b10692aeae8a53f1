#include "io/hf/remote_code.h"

#include <string>

#include "engine/error.h"

namespace canonlab {

namespace {

HfRemoteFile embedded(const std::string& name) {
  for (const HfRemoteFile& file : hf_remote_code_files())
    if (file.name == name) return file;
  // Only a build that lost a file of src/io/hf/remote_code/ gets here.
  throw Error("the Hugging Face model code file '" + name + "' is not embedded in this canonlab build (src/io/hf/remote_code/)");
}

}  // namespace

std::vector<HfRemoteFile> hf_remote_code_for(HfFormat f) {
  const char* stem = hf_module_stem(f);
  if (!stem) return {};
  return {embedded("configuration_" + std::string(stem) + ".py"), embedded("modeling_" + std::string(stem) + ".py"),
          embedded("canonlab_hf_layers.py")};
}

}  // namespace canonlab
