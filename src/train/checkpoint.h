#pragma once
// Checkpoints are two safetensors files per step plus a pointer file:
//   checkpoints/step_00001000.model.safetensors  model weights, PyTorch names and shapes, config in metadata
//   checkpoints/step_00001000.state.safetensors  AdamW moments and the training cursor (step, update count)
//   checkpoints/latest.json                      {"step": 1000, "model": "...", "state": "..."}
// Each file is written atomically and latest.json is replaced last, so a crash at any moment leaves the
// previous checkpoint fully valid. Loading validates the whole file (structure, checksum, every tensor's
// name and shape against the model) before a single parameter is overwritten.
#include <optional>
#include <string>

#include "config/run_config.h"
#include "engine/params.h"
#include "io/safetensors.h"
#include "train/adamw.h"

namespace canonlab {

struct TrainingCursor {
  int step = 0;  // number of completed training steps; the next step to run
};

// Writes the model weights with the resolved config in the metadata ("canonlab.config"). Returns the file's data
// checksum, which the state file saved with it records.
std::string save_model(const std::string& path, const RunConfig& cfg, const ParameterStore<float>& params, int step);
// Reads and validates a checkpoint file (safetensors structure and both checksums). A canonlab file must carry the
// data checksum, from format 2 on the header checksum too (so its metadata is covered); format 1, and a file of
// another tool without both checksums, are read with a warning on stderr saying what could not be verified.
SafetensorsFile read_checkpoint_file(const std::string& path);
// Reads the resolved config stored in a model checkpoint.
RunConfig read_model_config(const std::string& path);
RunConfig read_model_config(const SafetensorsFile& file);
// Loads weights into `params`; throws (leaving params untouched) on any missing, extra, mis-shaped or
// non-finite tensor.
void load_model(const std::string& path, ParameterStore<float>& params);
void load_model(const SafetensorsFile& file, ParameterStore<float>& params);
// A whole-number metadata entry (canonlab.step, canonlab.adam_t), parsed strictly; throws naming file and key.
int64_t checkpoint_count(const SafetensorsFile& file, const std::string& key);

// Saves model + optimizer + cursor under dir, then points latest.json at them and prunes old checkpoints.
void save_checkpoint(const std::string& dir, const RunConfig& cfg, const ParameterStore<float>& params,
                     const AdamWState& opt, const TrainingCursor& cursor);
// Removes all but the newest keep_checkpoints step checkpoints in dir (never current_stem, "step_00001000"),
// including orphans: a model or state file whose partner is gone.
void prune_checkpoints(const std::string& dir, const std::string& current_stem, int keep_checkpoints);
// What dir/latest.json points at; nothing when no checkpoint was written yet. Throws if it is corrupt.
struct LatestCheckpoint {
  int step = 0;
  std::string model_path, state_path;
};
std::optional<LatestCheckpoint> read_latest_checkpoint(const std::string& dir);
// Path of the model file of the latest checkpoint in dir, or "" if there is none.
std::string latest_model_path(const std::string& dir);
// Restores params, optimizer state and cursor from the latest checkpoint in dir; the stored config must equal
// `cfg` (apart from settings that do not change the trajectory), else an error names the differing keys. The state
// file must have been saved with the model file (its canonlab.model_data_checksum; format 1 and 2 state files,
// which lack it, must carry the model file's config and are resumed with a warning).
TrainingCursor load_latest_checkpoint(const std::string& dir, const RunConfig& cfg, ParameterStore<float>& params,
                                      AdamWState& opt);

}  // namespace canonlab
