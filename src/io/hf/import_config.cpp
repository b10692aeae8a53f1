// The run config of an import (io/hf/import.h): apart from import.cpp, which builds the model, so that the fuzz target
// for Hugging Face folders (tests/fuzz/hf_folder.cpp) checks the same config path without the engine.
#include <algorithm>

#include "config/config.h"
#include "engine/error.h"
#include "io/hf/import.h"
#include "io/json_read.h"

namespace canonlab {

namespace {

constexpr int kDefaultCopySymbols = 24;  // task.n_symbols' default, lowered to what the model's vocabulary allows

}  // namespace

RunConfig imported_run_config(const ModelConfig& model, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides)
    CANONLAB_CHECK(!o.starts_with("model.") && !o.starts_with("model="),
                   "--set " + brief_text(o) + ": the imported weights fix model.*; only task.*, train.* and probe.* keys can be set");
  RunConfig cfg;
  cfg.model = model;
  // The copy task over the whole vocabulary: its BOS is id task.vocab, the model's last token.
  cfg.task.name = "copy";
  cfg.task.vocab = std::max(1, model.vocab_size - 1);
  cfg.task.n_symbols = std::max(1, std::min({kDefaultCopySymbols, cfg.task.vocab, (model.max_seq_len - 1) / 2}));
  return config_from_yaml_string(config_to_yaml(cfg), overrides);
}

}  // namespace canonlab
