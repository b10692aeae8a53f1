#pragma once
// canonlab export RUN --to hf: a checkpoint as a Hugging Face model folder (docs/huggingface.md).
//   config.json             LlamaForCausalLM ("llama"), PhysicsLM4's LlamaCanon, or for gla / gdn / mamba2 PhysicsLM4's
//                           GLACanon / GatedDeltaNetCanon / Mamba2Canon, chosen by hf_export_format
//   model.safetensors       the weights, F32, under the format's names (io/hf/hf_plan.h), bytes unchanged (a fused MLP
//                           matrix is the concatenation of ours)
//   generation_config.json  greedy decoding, the copy task's BOS
//   configuration_*.py, modeling_*.py, canonlab_hf_layers.py
//                           the Canon formats only: canonlab's model code for them, named by config.json's auto_map, so
//                           that transformers loads the folder with trust_remote_code (io/hf/remote_code.h)
#include <string>
#include <vector>

#include "io/hf/hf_config.h"

namespace canonlab {

struct HfExportResult {
  std::string checkpoint;  // the .model.safetensors file exported
  int step = 0;
  HfFormat format = HfFormat::llama;
  size_t tensors = 0;
  std::vector<std::string> files;  // the files written, in order (config.json last)
};

// `where`: a .model.safetensors file, a run directory or its checkpoints/ (the latest checkpoint), as for eval.
// `out_dir` must not exist or be empty, unless `force`, which replaces the files an export writes and leaves anything
// else there.
// Every file is written atomically; nothing is written when the model cannot be exported.
HfExportResult export_hf(const std::string& where, const std::string& out_dir, bool force);

}  // namespace canonlab
