#include "io/hf/hf_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/json_read.h"
#include "io/paths.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Like the reference implementation (and io/safetensors.cpp): a larger header is a damaged length prefix.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A dimension beyond 2^40 is a damaged shape; it also keeps the byte-size product below overflow for sane ranks.
constexpr int64_t kMaxDim = int64_t(1) << 40;

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

// IEEE binary16 -> binary32; every half value, subnormals included, is exactly representable.
float half_to_float(uint16_t h) {
  const uint32_t sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float v;
  if (exponent == 0) v = std::ldexp(float(mantissa), -24);
  else if (exponent == 31) v = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(float(mantissa | 0x400), int(exponent) - 25);
  return sign ? -v : v;
}

// bfloat16 is the top half of a binary32.
float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

struct Entry {
  std::string name;
  HfTensor tensor;
  uint64_t begin = 0, end = 0;  // within the data section
};

// A valid header nests three levels: the top object, an entry (or __metadata__), a shape or offsets array.
constexpr int kMaxHeaderDepth = 3;

}  // namespace

HfTensors read_hf_safetensors_header(const std::string& path) {
  const auto corrupt = [&](const std::string& what) {
    return Error("Hugging Face weights '" + path + "' are not a valid safetensors file: " + what);
  };
  InputFile file(path, "Hugging Face weights");
  if (file.size() < 8) throw corrupt("the file has " + std::to_string(file.size()) + " bytes, fewer than the 8 of the header length");
  uint64_t header_len = 0;
  file.read_exact(std::as_writable_bytes(std::span(&header_len, 1)));
  if (header_len > kMaxHeaderBytes || header_len > file.size() - 8)
    throw corrupt("the header length " + std::to_string(header_len) + " exceeds the file (" + std::to_string(file.size()) +
                  " bytes) or the 100 MB limit");
  std::string header(header_len, '\0');
  file.read_exact(std::as_writable_bytes(std::span(header)));
  const uint64_t data_begin = 8 + header_len, data_size = file.size() - data_begin;
  const nlohmann::json j = parse_json(header, "Hugging Face weights '" + path + "' are not a valid safetensors file: the header",
                                      kMaxHeaderDepth);
  if (!j.is_object()) throw corrupt("the header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw corrupt("__metadata__ is not an object");
      continue;
    }
    const std::string where = "tensor '" + brief_text(name) + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") || v.size() != 3)
      throw corrupt(where + "expected an object with exactly dtype, shape and data_offsets, got " + brief(v));
    if (!v["dtype"].is_string()) throw corrupt(where + "dtype is " + brief(v["dtype"]) + ", not a string");
    Entry e;
    e.name = name;
    e.tensor.file = path;
    e.tensor.dtype = v["dtype"].get<std::string>();
    const size_t elem = dtype_bytes(e.tensor.dtype);
    if (elem == 0)
      throw Error("Hugging Face weights '" + path + "': " + where + "dtype " + brief_text(e.tensor.dtype) +
                  " is not supported; allowed: F32, BF16, F16 (save the model in one of these)");
    uint64_t numel = 1;
    if (!v["shape"].is_array()) throw corrupt(where + "shape is " + brief(v["shape"]) + ", not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxDim)
        throw corrupt(where + "shape " + brief(v["shape"]) + " has a dimension that is not an integer in [0, 2^40]");
      e.tensor.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(numel, uint64_t(d.get<int64_t>()), &numel))
        throw corrupt(where + "shape " + brief(v["shape"]) + " overflows");
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw corrupt(where + "data_offsets " + brief(off) + " are not two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      throw corrupt(where + "data_offsets " + brief(off) + " are not within the data size " + std::to_string(data_size));
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(elem), &bytes) || bytes != e.end - e.begin)
      throw corrupt(where + "shape " + brief(v["shape"]) + " of " + e.tensor.dtype + " needs " + std::to_string(bytes) +
                    " bytes, data_offsets " + brief(off) + " hold " + std::to_string(e.end - e.begin));
    e.tensor.offset = data_begin + e.begin;
    e.tensor.bytes = bytes;
    entries.push_back(std::move(e));
  }
  // The tensors must tile the data buffer: a gap, an overlap or trailing bytes mean a damaged or edited file.
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t at = 0;
  for (const Entry* e : order) {
    if (e->begin != at)
      throw corrupt("tensor '" + brief_text(e->name) + "' starts at byte " + std::to_string(e->begin) +
                    " of the data, expected " + std::to_string(at) +
                    " (tensors must tile the data buffer without gaps or overlaps)");
    at = e->end;
  }
  if (at != data_size)
    throw corrupt("the tensors end at byte " + std::to_string(at) + " of the data, which has " +
                  std::to_string(data_size) + " (trailing bytes)");

  HfTensors out;
  for (Entry& e : entries) out.emplace(e.name, std::move(e.tensor));
  return out;
}

std::vector<float> read_hf_tensor(const std::string& name, const HfTensor& t) {
  InputFile file(t.file, "Hugging Face weights");
  if (t.offset + t.bytes > file.size())
    throw Error("Hugging Face weights '" + t.file + "': tensor '" + brief_text(name) + "' ends at byte " +
                std::to_string(t.offset + t.bytes) + ", but the file now has " + std::to_string(file.size()) +
                " bytes (was it changed while being read?)");
  std::vector<std::byte> raw(t.bytes);
  file.seek(t.offset);
  file.read_exact(raw);
  const size_t n = t.bytes / dtype_bytes(t.dtype);
  std::vector<float> values(n);
  if (t.dtype == "F32") {
    if (n) std::memcpy(values.data(), raw.data(), n * 4);
  } else {
    const bool bf16 = t.dtype == "BF16";
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      values[i] = bf16 ? bf16_to_float(h) : half_to_float(h);
    }
  }
  for (size_t i = 0; i < n; i++)
    if (!std::isfinite(values[i]))
      throw Error("Hugging Face weights '" + t.file + "': tensor '" + brief_text(name) + "' value " + std::to_string(i) +
                  " is " + std::to_string(values[i]) + "; canonlab loads finite weights only");
  return values;
}

HfTensors read_hf_weights(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (path_exists(single, "Hugging Face weights")) return read_hf_safetensors_header(single.string());
  if (!path_exists(index, "Hugging Face weight index"))
    throw Error("Hugging Face folder '" + dir + "' has neither model.safetensors nor model.safetensors.index.json "
                "(pytorch_model.bin is not read: save with save_pretrained(..., safe_serialization=True))");
  const nlohmann::json j = parse_json(read_text_file(index.string(), 100'000'000, "Hugging Face weight index"),
                                      "Hugging Face weight index '" + index.string() + "'");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error("Hugging Face weight index '" + index.string() + "' has no weight_map object");
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    // Shards lie next to the index; a path elsewhere would read files the folder does not own.
    if (!file.is_string() || file.get<std::string>().empty() || file.get<std::string>().find('/') != std::string::npos ||
        file.get<std::string>() == "..")
      throw Error("Hugging Face weight index '" + index.string() + "': weight_map['" + brief_text(name) + "'] is " + brief(file) +
                  "; allowed: the file name of a shard in the same folder");
    shard_of[name] = file.get<std::string>();
    shards.insert(file.get<std::string>());
  }
  HfTensors out;
  for (const std::string& shard : shards) {
    HfTensors part = read_hf_safetensors_header((fs::path(dir) / shard).string());
    for (auto& [name, t] : part) {
      const auto it = shard_of.find(name);
      if (it == shard_of.end() || it->second != shard)
        throw Error("Hugging Face weights: tensor '" + brief_text(name) + "' is in shard '" + brief_text(shard) + "', but '" + index.string() +
                    "' " + (it == shard_of.end() ? "does not name it" : "names shard '" + brief_text(it->second) + "'"));
      out.emplace(name, std::move(t));
    }
  }
  for (const auto& [name, shard] : shard_of)
    if (!out.count(name))
      throw Error("Hugging Face weights: tensor '" + brief_text(name) + "' is missing from shard '" + brief_text(shard) + "' named by '" +
                  index.string() + "'");
  return out;
}

}  // namespace canonlab
