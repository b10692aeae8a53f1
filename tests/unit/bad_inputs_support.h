#pragma once
// Helpers shared by the tests of bad inputs and damaged or reused run directories (test_bad_inputs.cpp,
// test_run_integrity.cpp): scratch directories, whole-file text I/O, the message of a canonlab::Error, a tiny run
// trained in-process, and byte-level edits of a safetensors header.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "expect_error.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace canonlab::test_support {

namespace fs = std::filesystem;

inline std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("canonlab_bad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

inline void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string source_path(const std::string& relative) { return std::string(CANONLAB_SOURCE_DIR) + "/" + relative; }

inline RunConfig tiny_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.d_model=16",  "model.n_heads=2",     "model.n_layers=1", "task.vocab=10",
                                   "task.n_symbols=4",  "train.batch_size=2",  "train.steps=8",    "train.threads=1",
                                   "train.eval_every=4", "train.checkpoint_every=2", "probe.n_sequences=4"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config_from_yaml_string("{}", sets);
}

inline nlohmann::json train_quietly(const RunConfig& cfg, const std::string& dir, bool resume = false) {
  TrainOptions o;
  o.out_dir = dir;
  o.resume = resume;
  o.progress = false;
  o.probe_at_end = false;
  return train(cfg, o);
}

// The safetensors header (length prefix stripped) and the data of a file, for targeted edits.
struct RawFile {
  std::string header, data;
};
inline RawFile split_file(const fs::path& path) {
  const std::string bytes = read_text(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}
inline void join_file(const fs::path& path, const RawFile& f) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; i++) bytes[size_t(i)] = char((f.header.size() >> (8 * i)) & 0xff);
  write_text(path, bytes + f.header + f.data);
}

// Rewrites a checkpoint file (F32 tensors) with metadata entries changed: a value replaces or adds the entry, nullopt
// removes it. The checksums are the writer's, so the file is valid and only what the change says can tell.
inline void rewrite_checkpoint(const std::string& path, const std::map<std::string, std::optional<std::string>>& changes) {
  const SafetensorsFile file = read_safetensors(path);
  SafetensorsWriter w;
  for (const auto& [key, value] : file.metadata)
    if (key != kChecksumKey && key != kChecksumAlgoKey && key != kHeaderChecksumKey && !changes.count(key))
      w.add_metadata(key, value);
  for (const auto& [key, value] : changes)
    if (value) w.add_metadata(key, *value);
  std::vector<std::vector<float>> values;  // the writer keeps views of them until it has written
  for (const TensorEntry& t : file.tensors) {
    values.push_back(t.to_vector<float>());
    w.add(t.name, values.back(), t.shape);
  }
  w.write_atomic(path);
}

}  // namespace canonlab::test_support
