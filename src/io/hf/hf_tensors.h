#pragma once
// The weights of a Hugging Face model folder as fp32: `model.safetensors`, or the shards that
// `model.safetensors.index.json` names. Hugging Face saves F32, BF16 or F16; canonlab's own reader
// (io/safetensors.h) accepts only the four dtypes of its checkpoints, so this reader is separate: it applies the
// same structural rules (sizes against the real file, a JSON object header, known dtypes, shapes matching offsets,
// tensors tiling the data buffer exactly) and widens BF16 and F16 to fp32, which is exact for both.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace canonlab {

struct HfTensor {
  std::string dtype;            // as stored: "F32", "BF16" or "F16"
  std::vector<int64_t> shape;   // [] for a scalar
  std::vector<float> values;    // row-major, widened to fp32
  std::string file;             // the file it came from, for messages
};
using HfTensors = std::map<std::string, HfTensor>;

// One safetensors file; throws canonlab::Error "Hugging Face weights '<path>' ...: <what>" on anything malformed,
// on a dtype other than F32/BF16/F16 and on a non-finite value (canonlab refuses those in any checkpoint).
HfTensors read_hf_safetensors(const std::string& path);

// A model folder: model.safetensors, else the shards of model.safetensors.index.json (each named tensor must be in the
// shard the index names, and no tensor may appear twice). Throws naming the folder when neither file is there.
HfTensors read_hf_weights(const std::string& dir);

}  // namespace canonlab
