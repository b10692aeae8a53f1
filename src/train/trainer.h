#pragma once
// The training loop: data -> forward -> masked loss -> backward -> clip -> AdamW, with evaluation on fixed
// held-out batches, checkpoints, metrics files, a progress bar, and a NaN/inf guard that names the first
// module whose output went non-finite.
#include <string>

#include <nlohmann/json.hpp>

#include "config/run_config.h"

namespace canonlab {

struct TrainOptions {
  std::string out_dir;
  bool resume = false;
  bool progress = true;  // progress bar on stderr
  bool probe_at_end = true;
};

// Runs the whole training described by cfg; returns the summary also written to out_dir/summary.json.
nlohmann::json train(const RunConfig& cfg, const TrainOptions& options);

}  // namespace canonlab
