#pragma once
// canonlab import-hf DIR --out RUN_DIR: a Hugging Face LlamaForCausalLM folder, or a PhysicsLM4 LlamaCanon, GLACanon,
// GatedDeltaNetCanon or Mamba2Canon one, as a canonlab run directory that eval, probe, generate and debug-dump
// accept (docs/huggingface.md):
//   RUN_DIR/config.resolved.yaml                              the model from config.json, a task (below), defaults
//   RUN_DIR/checkpoints/step_00000000.{model,state}.safetensors  the weights as fp32 (zero AdamW moments)
//   RUN_DIR/checkpoints/latest.json, RUN_DIR/imported_from.json  where the weights came from
// The task defaults to copy with the model's vocabulary (task.vocab = vocab_size - 1, its BOS the last id); `overrides`
// ("task.name=depo", as --set) change task.*, train.* and probe.* keys; model.* is fixed by the weights.
#include <string>
#include <vector>

#include "config/run_config.h"
#include "io/hf/hf_config.h"

namespace canonlab {

struct HfImportResult {
  std::string checkpoint;  // the .model.safetensors file written
  HfFormat format = HfFormat::llama;
  size_t tensors = 0;
  RunConfig cfg;
};

// The run config of an import: the model of config.json, the default task, then `overrides`.
RunConfig imported_run_config(const ModelConfig& model, const std::vector<std::string>& overrides);

// Refuses a RUN_DIR that exists and is not empty, and writes nothing unless the whole folder converts.
HfImportResult import_hf(const std::string& dir, const std::string& run_dir, const std::vector<std::string>& overrides);

}  // namespace canonlab
