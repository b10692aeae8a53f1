#pragma once
// A pack: several runs trained in one process, step by step side by side (docs/sweeps.md#packs). Each run is a
// TrainingRun (train/trainer.h) with its own model, optimizer state, data stream, metrics, checkpoints and run
// directory, driven by exactly the calls `canonlab train` makes, so each run gives the bits it gives alone; nothing
// of one run is shared with another. A run that fails (NaN, bad input, a locked directory) ends alone with its
// error; its pack-mates go on. A stop signal ends every run after its current step with a checkpoint.
//
// On the CPU `width` runs step at once, one thread each (runs of train.threads 1; see pack_width), which is what
// `canonlab sweep --jobs` does with processes; the pack is the shape a GPU pack (one batched step) will take.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "train/stop_signals.h"
#include "train/trainer.h"

namespace canonlab {

struct PackMember {
  RunConfig config;
  TrainOptions options;  // out_dir, resume, force; progress is off in a pack
};

enum class PackRunEnd { done, failed, interrupted };

struct PackRunResult {
  PackRunEnd end = PackRunEnd::failed;
  std::string error;      // failed: what stopped it; interrupted: the signal
  int steps_done = 0;     // the step its checkpoint holds (interrupted) or reached
  nlohmann::json summary; // done: the summary also written to summary.json
  bool kept = false;      // done before this process (summary.json holds its steps): not trained again
};

// Trains the members side by side until each is done, failed or stopped; one result per member, in order.
// stop_signals: the process's guard. width: runs stepping at once (1: one after another, each with its own
// train.threads); more than 1 needs every member at train.threads 1, and runs each step in one thread.
std::vector<PackRunResult> train_pack(std::vector<PackMember> members, const StopSignals& stop_signals, int width);

// The runs that can step at once in a process with `cores` cores: cores / train.threads of the members, at least 1.
int pack_width(const std::vector<PackMember>& members, int cores);

// What must be equal for runs to share a pack: the model's parameter names and shapes (parameter_layout: registered,
// never allocated, so a sweep of large models groups its runs without building them), the step's activation shapes
// (batch, window, micro-batches) and the device, precision and thread count. Runs that differ in seeds, learning
// rate, key-shift layer, ALiBi or task parameters with the same window are compatible.
std::string pack_signature(const RunConfig& config);

}  // namespace canonlab
