#pragma once
// The probe report of a trained model, in one place for every command that prints it (train's end, eval,
// probe): held-out loss and copy_acc on the fixed eval batches, and on the copy task the IPMR matrices at
// delta = 1 and the key-shift offset with top heads, mean and global rates (eval/ipmr.h).
//   JSON: {"eval": {...}, "ipmr": ipmr_to_json(...)} -- summary.json's "eval" and "ipmr" have this shape.
//   text: the eval metrics, then format_ipmr's table.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "data/task.h"
#include "eval/ipmr.h"
#include "models/language_model.h"
#include "train/resource_estimate.h"

namespace canonlab {

struct ProbeResult {
  nlohmann::json eval;             // {"loss", <task metrics>} on cfg's fixed held-out eval batches
  std::optional<IpmrResult> ipmr;  // copy task only
  int top_k = 5;                   // probe.top_heads: how many heads the reports list

  nlohmann::json ipmr_json() const;  // ipmr_to_json(*ipmr, top_k), or null without IPMR
  nlohmann::json to_json() const;    // {"eval", "ipmr"} ("ipmr" only when measured)
  std::string eval_text() const;     // "  eval copy_acc = 0.99\n" per metric
  std::string ipmr_text() const;     // format_ipmr(*ipmr, top_k), or "" without IPMR
};

// Evaluates `model` on cfg's held-out eval batches, then measures IPMR when `task` is the copy task.
ProbeResult run_probe(LanguageModel<float>& model, const Task& task, const RunConfig& cfg);
// Same, reusing an evaluation the caller already ran on those batches (the trainer's final eval step), so the
// end of training does not evaluate twice.
ProbeResult run_probe(LanguageModel<float>& model, const Task& task, const RunConfig& cfg, nlohmann::json eval);

// A trained model read back from a checkpoint, with the config it was trained with.
struct LoadedCheckpoint {
  std::string path;  // the .model.safetensors file
  int step = 0;
  RunConfig cfg;
  std::unique_ptr<Task> task;
  std::unique_ptr<LanguageModel<float>> model;
};

// `where`: a .model.safetensors file, a run directory, or a checkpoints/ directory (its latest checkpoint).
// Applies the run's train.threads, so probes see the same numerics as the end of training.
// `overrides` ("task.context=64", as --set) change how the model is evaluated: the task (a longer cycle, a
// smaller window, more eval samples), train.* and probe.* keys. A model.* key is refused: the weights fix the model.
// Before the model is built, the checkpoint's tensors must add up to the parameters its config describes, and the
// estimated memory of `purpose` must fit (train/resource_estimate.h); either failure is an Error naming the file.
LoadedCheckpoint load_checkpoint(const std::string& where, const std::vector<std::string>& overrides = {},
                                 Purpose purpose = Purpose::eval);

}  // namespace canonlab
