#pragma once
// The Hugging Face model code canonlab ships (src/io/hf/remote_code/*.py, docs/huggingface.md): for each Canon format
// a configuration_<stem>.py and a modeling_<stem>.py, plus canonlab_hf_layers.py, which both import relatively. The
// build compiles the files into the library (cmake/embed_hf_remote_code.cmake), and `export` writes the ones a format
// needs beside the weights, with config.json's auto_map naming them, so that
// AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True) loads the folder with torch and transformers only.
#include <span>
#include <string_view>
#include <vector>

#include "io/hf/hf_config.h"

namespace canonlab {

struct HfRemoteFile {
  std::string_view name;  // "modeling_llama_canon.py"
  std::string_view text;  // the file's bytes
};

// Every embedded file, sorted by name (defined in the generated hf_remote_code.cpp).
std::span<const HfRemoteFile> hf_remote_code_files();

// The files a folder of format `f` needs: configuration_<stem>.py, modeling_<stem>.py and canonlab_hf_layers.py; none
// for stock llama, which transformers implements itself.
std::vector<HfRemoteFile> hf_remote_code_for(HfFormat f);

}  // namespace canonlab
