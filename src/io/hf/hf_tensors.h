#pragma once
// The weights of a Hugging Face model folder, read as fp32: `model.safetensors`, or the shards that
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
  std::string file;             // the file it is in
  uint64_t offset = 0;          // of its first byte in `file`
  uint64_t bytes = 0;           // numel times the dtype's size
};
using HfTensors = std::map<std::string, HfTensor>;

// The header of one safetensors file, read and checked before any data: the 8-byte length and the JSON header
// against the real file size, every tensor's range against the data section. Throws canonlab::Error
// "Hugging Face weights '<path>' ...: <what>" on anything malformed and on a dtype other than F32/BF16/F16. Nothing
// but the header is read, so a huge or junk file costs no memory.
HfTensors read_hf_safetensors_header(const std::string& path);

// A model folder: model.safetensors, else the shards of model.safetensors.index.json (each named tensor must be in the
// shard the index names, and no tensor may appear twice). Throws naming the folder when neither file is there. Only
// the headers are read; read_hf_tensor reads a tensor's values once the caller knows it wants them.
HfTensors read_hf_weights(const std::string& dir);

// One tensor's values, row-major, widened to fp32 (exact for BF16 and F16). Throws on a non-finite value (canonlab
// refuses those in any checkpoint) and on a file that changed since its header was read.
std::vector<float> read_hf_tensor(const std::string& name, const HfTensor& tensor);

}  // namespace canonlab
