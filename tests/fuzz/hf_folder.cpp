// Fuzz target: a Hugging Face model folder as `canonlab import-hf` reads it, before the model is built: config.json
// through read_hf_config, model_config_from_hf and imported_run_config (io/hf/), the weights' headers through read_hf_weights
// (model.safetensors, or model.safetensors.index.json and its shard), and the values of the tensors that fit a small
// budget through read_hf_tensor.
//
// The input is up to four parts separated by the line "==>" (kPartMarker, in dict/json.dict):
//   config.json ==> model.safetensors.index.json ==> the safetensors header JSON ==> the data bytes
// An empty index part means no index: the header and data are written as model.safetensors (8-byte length first);
// otherwise they are the shard model-00001-of-00001.safetensors, and the index decides what else is named.
//
// Contract: canonlab::Error is the only way to reject an input. A config that maps gives a model whose every size is
// within its canonlab key's limit (the import's arithmetic is checked before narrowing); headers that read describe
// tensors inside their file whose byte size is their shape's, and read_hf_tensor gives numel values for them.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "fuzz_support.h"
#include "io/atomic_file.h"
#include "io/hf/hf_config.h"
#include "io/hf/hf_tensors.h"
#include "io/hf/import.h"
#include "io/json_read.h"

namespace {

namespace fs = std::filesystem;
constexpr std::string_view kPartMarker = "\n==>\n";
constexpr uint64_t kValueBudget = uint64_t(1) << 20;  // bytes of tensor data read per input

std::vector<std::string> split_parts(const std::string& text) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (parts.size() < 3) {
    const size_t next = text.find(kPartMarker, at);
    if (next == std::string::npos) break;
    parts.push_back(text.substr(at, next - at));
    at = next + kPartMarker.size();
  }
  parts.push_back(text.substr(at));
  parts.resize(4);
  return parts;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  canonlab::fuzz::expect(bool(out), "cannot write " + path.string());
}

void check_sizes_within_limits(const canonlab::ModelConfig& m) {
  const std::pair<const char*, int> sizes[] = {
      {"model.d_model", m.d_model},         {"model.n_layers", m.n_layers},
      {"model.n_heads", m.n_heads},         {"model.vocab_size", m.vocab_size},
      {"model.max_seq_len", m.max_seq_len}, {"model.mlp.hidden_dim", m.mlp.hidden_dim},
      {"model.canon.kernel_size", m.canon.kernel_size}, {"model.recurrent.conv_kernel", m.recurrent.conv_kernel},
      {"model.mamba2.d_state", m.mamba2.d_state}, {"model.mamba2.headdim", m.mamba2.headdim},
      {"model.mamba2.expand", m.mamba2.expand}};
  for (const auto& [key, value] : sizes)
    canonlab::fuzz::expect(value >= 0 && double(value) <= canonlab::config_key_upper_limit(key),
                           std::string("model_config_from_hf gave ") + key + " = " + std::to_string(value) +
                               ", outside [0, its limit]");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace canonlab;
  const std::vector<std::string> parts = split_parts(fuzz::as_text(data, size));
  const fs::path dir = fuzz::workspace().root() / "hf";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_bytes(dir / "config.json", parts[0]);
  const uint64_t header_len = parts[2].size();
  std::string file(8, '\0');
  for (int i = 0; i < 8; i++) file[size_t(i)] = char((header_len >> (8 * i)) & 0xff);
  file += parts[2] + parts[3];
  if (parts[1].empty()) {
    write_bytes(dir / "model.safetensors", file);
  } else {
    write_bytes(dir / "model.safetensors.index.json", parts[1]);
    write_bytes(dir / "model-00001-of-00001.safetensors", file);
  }

  try {
    const std::string path = (dir / "config.json").string();
    const nlohmann::json config = read_hf_config(path);
    const ModelConfig model = model_config_from_hf(config, path);
    check_sizes_within_limits(model);
    (void)imported_run_config(model, {});
  } catch (const Error&) {
  }

  try {
    const HfTensors tensors = read_hf_weights(dir.string());
    uint64_t budget = kValueBudget;
    for (const auto& [name, t] : tensors) {
      uint64_t numel = 1;
      for (int64_t d : t.shape) numel *= uint64_t(d);  // read_hf_safetensors_header checked it does not overflow
      const uint64_t elem = t.dtype == "F32" ? 4 : 2;
      fuzz::expect(numel * elem == t.bytes, "tensor '" + brief_text(name) + "': shape and byte size disagree");
      fuzz::expect(t.offset + t.bytes <= fs::file_size(t.file), "tensor '" + brief_text(name) + "' ends past its file");
      if (t.bytes > budget) continue;
      budget -= t.bytes;
      try {
        fuzz::expect(read_hf_tensor(name, t).size() == numel, "read_hf_tensor gave a wrong number of values");
      } catch (const Error&) {  // a non-finite value
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
