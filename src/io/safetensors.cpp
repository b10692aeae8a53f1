#include "io/safetensors.h"
#include "io/json_read.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

namespace canonlab {
namespace {

// ordered_json keeps keys in file order: the writer's header then lists tensors in the order they were
// added (deterministic bytes), and the reader can break ties between zero-size tensors by header order.
using ordered_json = nlohmann::ordered_json;

// The reference implementation refuses headers above 100 MB; so do we, before allocating for one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Shapes deeper than this are not tensors anyone writes; the cap keeps a hostile header's parse tree small.
constexpr size_t kMaxRank = 64;

// ---- XXH64 -------------------------------------------------------------------------------------------
// Straight from the xxHash specification (doc/xxhash_spec.md). A 64-bit hash rather than SHA-256 because
// it runs at memory speed: checksumming a multi-GB checkpoint must not stall training on two shared cores.

constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t P3 = 0x165667B19E3779F9ULL;
constexpr uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian host (static_assert in the header)
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round64(uint64_t acc, uint64_t input) {
  acc += input * P2;
  acc = std::rotl(acc, 31);
  return acc * P1;
}
inline uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round64(0, val);
  return acc * P1 + P4;
}

// Streaming form, so the reader can hash while reading tensor by tensor instead of holding a second copy.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0) : seed_(seed), v_{seed + P1 + P2, seed + P2, seed, seed - P1} {}

  void update(std::span<const std::byte> in) {
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    size_t n = in.size();
    total_ += n;
    if (buffered_ + n < 32) {
      if (n) std::memcpy(buf_ + buffered_, p, n);
      buffered_ += n;
      return;
    }
    if (buffered_ > 0) {
      size_t fill = 32 - buffered_;
      std::memcpy(buf_ + buffered_, p, fill);
      stripe(buf_);
      p += fill;
      n -= fill;
      buffered_ = 0;
    }
    for (; n >= 32; p += 32, n -= 32) stripe(p);
    if (n) std::memcpy(buf_, p, n);
    buffered_ = n;
  }

  uint64_t digest() const {
    uint64_t h;
    if (total_ >= 32) {
      h = std::rotl(v_[0], 1) + std::rotl(v_[1], 7) + std::rotl(v_[2], 12) + std::rotl(v_[3], 18);
      for (uint64_t v : v_) h = merge_round(h, v);
    } else {
      h = seed_ + P5;
    }
    h += total_;
    const unsigned char* p = buf_;
    size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = std::rotl(h ^ round64(0, read64(p)), 27) * P1 + P4;
    if (n >= 4) {
      h = std::rotl(h ^ (uint64_t(read32(p)) * P1), 23) * P2 + P3;
      p += 4;
      n -= 4;
    }
    for (; n > 0; p++, n--) h = std::rotl(h ^ (uint64_t(*p) * P5), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
  }

 private:
  void stripe(const unsigned char* p) {
    for (int i = 0; i < 4; i++) v_[i] = round64(v_[i], read64(p + 8 * i));
  }

  uint64_t seed_;
  uint64_t v_[4];
  unsigned char buf_[32] = {};
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; i--, v >>= 4) s[size_t(i)] = digits[v & 15];
  return s;
}

std::optional<uint64_t> parse_hex64(const std::string& s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return std::nullopt;
    v = (v << 4) | uint64_t(d);
  }
  return v;
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "F64") return DType::F64;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  return std::nullopt;
}

bool is_other_spec_dtype(const std::string& s) {
  static const char* known[] = {"BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "U64",
                                "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
  return std::any_of(std::begin(known), std::end(known), [&](const char* k) { return s == k; });
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Product of dims times the element size, or nullopt on overflow.
std::optional<uint64_t> checked_bytes(const std::vector<int64_t>& shape, size_t elem_size) {
  uint64_t n = elem_size;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return std::nullopt;
  return n;
}

struct HeaderProblem {
  std::string what;
};

// The header checksum entry exactly as the writer puts it in the compact JSON. Quotes inside JSON strings are
// escaped, so this text can only occur as the metadata entry itself.
std::string header_checksum_entry(const std::string& digits) {
  return std::string("\"") + kHeaderChecksumKey + "\":\"" + digits + "\"";
}
constexpr const char* kZeroDigits = "0000000000000000";

// XXH64 of `header` with the recorded digits read as zeros; nothing when the entry is not there exactly once.
std::optional<uint64_t> header_checksum(std::string header, const std::string& digits) {
  const std::string entry = header_checksum_entry(digits);
  const size_t at = header.find(entry);
  if (at == std::string::npos || header.find(entry, at + 1) != std::string::npos) return std::nullopt;
  header.replace(at, entry.size(), header_checksum_entry(kZeroDigits));
  return xxh64(std::as_bytes(std::span(header)));
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

uint64_t xxh64(std::span<const std::byte> data, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data);
  return h.digest();
}

// ---- TensorEntry / SafetensorsFile ---------------------------------------------------------------------

size_t TensorEntry::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

void TensorEntry::check_request(DType want, size_t count) const {
  if (want != dtype || count != numel())
    throw Error("tensor '" + name + "' is " + dtype_name(dtype) + " with shape " + shape_str(shape) + " (" +
                std::to_string(numel()) + " values), but " + std::to_string(count) + " " + dtype_name(want) +
                " values were requested");
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  for (const TensorEntry& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorEntry& SafetensorsFile::get(const std::string& name) const {
  if (const TensorEntry* t = find(name)) return *t;
  throw Error("checkpoint '" + path + "' has no tensor '" + name + "' (it has " + std::to_string(tensors.size()) +
              " tensors)");
}

// ---- Reader ----------------------------------------------------------------------------------------------

namespace {

// Parses the header, rejecting duplicate keys (nlohmann would silently keep the last one, so a file with two
// entries for one tensor would load whichever came last) and nesting/array sizes no valid header has.
ordered_json parse_header(const std::string& text) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string top_key, inner_key;           // the tensor entry and field being parsed, for messages
  size_t array_len = 0;
  auto where = [&] { return top_key == "__metadata__" ? std::string("__metadata__") : "tensor '" + top_key + "'"; };
  auto cb = [&](int depth, ordered_json::parse_event_t ev, ordered_json& parsed) {
    using E = ordered_json::parse_event_t;
    switch (ev) {
      case E::object_start:
      case E::array_start:
        // Valid headers have the top object (depth 0), entries (1) and shape/offset arrays (2).
        if (depth >= 3) throw HeaderProblem{where() + ": field '" + inner_key + "' nests deeper than the format allows"};
        if (ev == E::object_start) keys.emplace_back();
        array_len = 0;
        break;
      case E::object_end: keys.pop_back(); break;
      case E::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (depth == 1) top_key = k; else inner_key = k;
        if (!keys.back().insert(k).second) {
          if (depth == 1) throw HeaderProblem{k == "__metadata__" ? "duplicate __metadata__ entry" : "duplicate tensor name '" + k + "'"};
          throw HeaderProblem{where() + ": duplicate key '" + k + "'"};
        }
        break;
      }
      case E::value:
        if (depth == 3 && ++array_len > kMaxRank)
          throw HeaderProblem{where() + ": field '" + inner_key + "' has more than " + std::to_string(kMaxRank) + " elements"};
        break;
      default: break;
    }
    return true;
  };
  try {
    return parse_json<ordered_json>(text, "header", kMaxJsonDepth, cb);
  } catch (const Error& e) {
    throw HeaderProblem{e.what()};
  }
}

struct PendingTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

const ordered_json* field(const ordered_json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// An array of exactly `want` (or any number when want < 0) non-negative integers below 2^63.
std::optional<std::vector<int64_t>> uint_array(const ordered_json& j, int want) {
  if (!j.is_array() || (want >= 0 && j.size() != size_t(want))) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& e : j) {
    // nlohmann stores non-negative integers as number_unsigned; negatives and 2.0 / 1e3 are other types.
    if (!e.is_number_unsigned()) return std::nullopt;
    uint64_t v = e.get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    out.push_back(int64_t(v));
  }
  return out;
}

PendingTensor parse_tensor(const std::string& name, const ordered_json& info, uint64_t data_size) {
  auto bad = [&](const std::string& what) { return HeaderProblem{"tensor '" + name + "' " + what}; };
  if (!info.is_object()) throw bad("entry is not a JSON object");
  for (const auto& [k, v] : info.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets") throw bad("has unknown field '" + k + "'");

  const ordered_json* dt = field(info, "dtype");
  if (!dt) throw bad("has no 'dtype'");
  if (!dt->is_string()) throw bad("'dtype' is not a string");
  const std::string& dts = dt->get_ref<const std::string&>();
  std::optional<DType> dtype = parse_dtype(dts);
  if (!dtype) {
    if (is_other_spec_dtype(dts)) throw bad("has dtype '" + dts + "', which canonlab does not read (F32, F64, I32, I64)");
    throw bad("has unknown dtype '" + dts + "'");
  }

  const ordered_json* sh = field(info, "shape");
  if (!sh) throw bad("has no 'shape'");
  std::optional<std::vector<int64_t>> shape = uint_array(*sh, -1);
  if (!shape) throw bad("'shape' is not an array of non-negative integers: " + brief(*sh));

  const ordered_json* off = field(info, "data_offsets");
  if (!off) throw bad("has no 'data_offsets'");
  std::optional<std::vector<int64_t>> offsets = uint_array(*off, 2);
  if (!offsets) throw bad("'data_offsets' is not an array of two non-negative integers: " + brief(*off));
  uint64_t begin = uint64_t((*offsets)[0]), end = uint64_t((*offsets)[1]);
  if (begin > end) throw bad("data_offsets " + offsets_str(begin, end) + " end before they begin");
  if (end > data_size)
    throw bad("data_offsets " + offsets_str(begin, end) + " exceed the data size " + std::to_string(data_size));

  std::optional<uint64_t> bytes = checked_bytes(*shape, dtype_size(*dtype));
  if (!bytes || *bytes != end - begin)
    throw bad("has shape " + shape_str(*shape) + " and dtype " + dts + ", which need " +
              (bytes ? std::to_string(*bytes) : std::string("more than 2^64")) + " bytes, but data_offsets " +
              offsets_str(begin, end) + " span " + std::to_string(end - begin));
  return {name, *dtype, std::move(*shape), begin, end};
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  auto corrupt = [&](const std::string& what) { return Error("checkpoint '" + path + "' is corrupt: " + what); };

  InputFile file(path);
  const uint64_t file_size = file.size();
  if (file_size < 8)
    throw corrupt("the file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  std::byte prefix[8];
  file.read_exact(prefix);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | uint64_t(prefix[i]);  // little-endian
  if (header_len > kMaxHeaderBytes)
    throw corrupt("header length " + std::to_string(header_len) + " exceeds the limit of " +
                  std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > file_size - 8)
    throw corrupt("header length " + std::to_string(header_len) + " exceeds the " + std::to_string(file_size - 8) +
                  " bytes after the length prefix");
  const uint64_t data_size = file_size - 8 - header_len;

  std::string header_text(header_len, '\0');
  file.read_exact(std::as_writable_bytes(std::span(header_text)));

  SafetensorsFile out;
  out.path = path;
  std::vector<PendingTensor> pending;
  try {
    // nlohmann's lexer treats NUL as end of input, so "{...}\0garbage" would parse; valid JSON never holds one.
    if (size_t nul = header_text.find('\0'); nul != std::string::npos)
      throw HeaderProblem{"header is not valid JSON (NUL byte at offset " + std::to_string(nul) + ")"};
    ordered_json header = parse_header(header_text);
    if (!header.is_object()) throw HeaderProblem{"header is not a JSON object"};
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        if (!value.is_object()) throw HeaderProblem{"__metadata__ is not a JSON object"};
        for (const auto& [mk, mv] : value.items()) {
          if (!mv.is_string()) throw HeaderProblem{"__metadata__ value for '" + mk + "' is not a string"};
          out.metadata[mk] = mv.get<std::string>();
        }
      } else {
        pending.push_back(parse_tensor(key, value, data_size));
      }
    }
  } catch (const HeaderProblem& p) {
    throw corrupt(p.what);
  }

  // The tensors must tile the data buffer exactly: overlaps would alias two tensors, and gaps or a tail
  // mean bytes the header does not account for (a truncated header or appended garbage).
  std::stable_sort(pending.begin(), pending.end(), [](const PendingTensor& a, const PendingTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const PendingTensor* prev = nullptr;
  for (const PendingTensor& t : pending) {
    if (t.begin < covered)
      throw corrupt("tensors '" + prev->name + "' data_offsets " + offsets_str(prev->begin, prev->end) + " and '" +
                    t.name + "' data_offsets " + offsets_str(t.begin, t.end) + " overlap");
    if (t.begin > covered)
      throw corrupt("bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                    ") of the data buffer belong to no tensor");
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size)
    throw corrupt(std::to_string(data_size - covered) + " trailing bytes after the last tensor (the data buffer is " +
                  std::to_string(data_size) + " bytes, the tensors cover " + std::to_string(covered) + ")");

  // The header checksum is checked before anything in the header is trusted further.
  if (auto it = out.metadata.find(kHeaderChecksumKey); it != out.metadata.end()) {
    const std::optional<uint64_t> recorded = parse_hex64(it->second);
    if (!recorded) throw corrupt(std::string("header checksum '") + it->second + "' is not 16 lowercase hex digits");
    const std::optional<uint64_t> actual = header_checksum(header_text, it->second);
    if (!actual)
      throw corrupt(std::string("the header checksum entry is not written as canonlab writes it (\"") + kHeaderChecksumKey +
                    "\":\"<16 hex digits>\", exactly once), so the header cannot be verified");
    if (*actual != *recorded)
      throw corrupt("header checksum mismatch (xxh64 recorded " + hex64(*recorded) + ", computed " + hex64(*actual) +
                    "): the metadata or a tensor's name, dtype, shape or offsets were modified or damaged");
    out.header_checksum_verified = true;
  }

  // Checksum metadata is checked for form before the (possibly large) data read.
  auto sum_it = out.metadata.find(kChecksumKey);
  auto algo_it = out.metadata.find(kChecksumAlgoKey);
  std::optional<uint64_t> expected;
  if (sum_it != out.metadata.end() || algo_it != out.metadata.end()) {
    if (sum_it == out.metadata.end() || algo_it == out.metadata.end())
      throw corrupt(std::string("metadata has only one of '") + kChecksumKey + "' and '" + kChecksumAlgoKey + "'");
    if (algo_it->second != kChecksumAlgo)
      throw corrupt("unsupported checksum algorithm '" + algo_it->second + "' (canonlab writes '" + kChecksumAlgo + "')");
    expected = parse_hex64(sum_it->second);
    if (!expected) throw corrupt("checksum '" + sum_it->second + "' is not 16 lowercase hex digits");
  }

  // Every size below was checked against the real file size, so these allocations are bounded by it.
  Xxh64 hash;
  out.tensors.reserve(pending.size());
  for (PendingTensor& t : pending) {
    TensorEntry e;
    e.name = std::move(t.name);
    e.dtype = t.dtype;
    e.shape = std::move(t.shape);
    e.data.resize(t.end - t.begin);
    file.read_exact(e.data);
    hash.update(e.data);
    out.tensors.push_back(std::move(e));
  }
  if (expected) {
    uint64_t actual = hash.digest();
    if (actual != *expected)
      throw corrupt("data checksum mismatch (xxh64 recorded " + hex64(*expected) + ", computed " + hex64(actual) +
                    "): the tensor data was modified or damaged");
    out.checksum_verified = true;
  }
  return out;
}

// ---- Writer ----------------------------------------------------------------------------------------------

void SafetensorsWriter::add_metadata(std::string key, std::string value) {
  CANONLAB_CHECK(key != kChecksumKey && key != kChecksumAlgoKey && key != kHeaderChecksumKey,
                 "metadata key '" + key + "' is reserved for the checkpoint writer");
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::add(std::string name, std::span<const float> data, std::vector<int64_t> shape) {
  add_bytes(std::move(name), DType::F32, std::as_bytes(data), data.size(), std::move(shape));
}
void SafetensorsWriter::add(std::string name, std::span<const double> data, std::vector<int64_t> shape) {
  add_bytes(std::move(name), DType::F64, std::as_bytes(data), data.size(), std::move(shape));
}
void SafetensorsWriter::add(std::string name, std::span<const int32_t> data, std::vector<int64_t> shape) {
  add_bytes(std::move(name), DType::I32, std::as_bytes(data), data.size(), std::move(shape));
}
void SafetensorsWriter::add(std::string name, std::span<const int64_t> data, std::vector<int64_t> shape) {
  add_bytes(std::move(name), DType::I64, std::as_bytes(data), data.size(), std::move(shape));
}

void SafetensorsWriter::add_bytes(std::string name, DType dtype, std::span<const std::byte> bytes, size_t count,
                                  std::vector<int64_t> shape) {
  CANONLAB_CHECK(!name.empty(), "cannot add a tensor with an empty name");
  CANONLAB_CHECK(name != "__metadata__", "tensor name '__metadata__' is reserved by the safetensors format");
  CANONLAB_CHECK(!names_.count(name), "tensor '" + name + "' added twice");
  for (int64_t d : shape)
    CANONLAB_CHECK(d >= 0, "tensor '" + name + "' has a negative dimension in shape " + shape_str(shape));
  std::optional<uint64_t> want = checked_bytes(shape, 1);
  CANONLAB_CHECK(want && *want == count, "tensor '" + name + "' has shape " + shape_str(shape) + " but " +
                                             std::to_string(count) + " values were given");
  names_.insert(name);
  tensors_.push_back({std::move(name), dtype, std::move(shape), bytes});
}

std::string SafetensorsWriter::data_checksum() const {
  Xxh64 hash;
  for (const View& t : tensors_) hash.update(t.bytes);
  return hex64(hash.digest());
}

std::vector<std::byte> SafetensorsWriter::header_bytes(const std::string& data_checksum) const {
  std::map<std::string, std::string> meta = metadata_;
  meta[kChecksumKey] = data_checksum;
  meta[kChecksumAlgoKey] = kChecksumAlgo;
  meta[kHeaderChecksumKey] = kZeroDigits;  // placeholder, replaced by the real digits below

  ordered_json header = ordered_json::object();
  header["__metadata__"] = meta;  // std::map: keys sorted, so the bytes are deterministic
  uint64_t offset = 0;
  for (const View& t : tensors_) {
    ordered_json info = ordered_json::object();
    info["dtype"] = dtype_name(t.dtype);
    info["shape"] = t.shape;
    info["data_offsets"] = ordered_json::array({offset, offset + t.bytes.size()});
    header[t.name] = std::move(info);
    offset += t.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();  // strict: throws on names or metadata that are not valid UTF-8
  } catch (const ordered_json::exception& e) {
    throw Error(std::string("cannot write safetensors header: ") + e.what());
  }
  // Pad with spaces to a multiple of 8 as the reference writer does, so the data buffer starts 8-aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  // The zero placeholder is hashed, then overwritten in place by the digits (same length, same layout).
  const std::string placeholder = header_checksum_entry(kZeroDigits);
  const size_t at = text.find(placeholder);
  CANONLAB_CHECK(at != std::string::npos, "internal error: header checksum placeholder missing");
  text.replace(at, placeholder.size(), header_checksum_entry(hex64(xxh64(std::as_bytes(std::span(text))))));
  CANONLAB_CHECK(text.size() <= kMaxHeaderBytes, "safetensors header of " + std::to_string(text.size()) +
                                                     " bytes exceeds the format's 100 MB limit");
  std::vector<std::byte> out(8 + text.size());
  uint64_t n = text.size();
  for (int i = 0; i < 8; i++) out[size_t(i)] = std::byte((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

std::vector<std::byte> SafetensorsWriter::serialize() const {
  std::vector<std::byte> out = header_bytes(data_checksum());
  for (const View& t : tensors_) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

std::string SafetensorsWriter::write_atomic(const std::string& path, const AtomicWriteOptions& options) const {
  const std::string checksum = data_checksum();
  std::vector<std::byte> header = header_bytes(checksum);
  AtomicFileWriter writer(path, options);
  writer.write(header);
  // Straight from the caller's buffers: a checkpoint is never copied into one big staging buffer.
  for (const View& t : tensors_) writer.write(t.bytes);
  writer.commit();
  return checksum;
}

}  // namespace canonlab
