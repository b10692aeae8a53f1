#pragma once
// Reading and writing the safetensors format (https://github.com/huggingface/safetensors), which is what
// canonlab checkpoints are: PyTorch, NumPy and the `safetensors` Python package load them directly.
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON (padded with spaces to a multiple of 8),
// then the data buffer. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data buffer, data row-major little-endian) plus an optional "__metadata__"
// object of string -> string. See docs/checkpoint-format.md.
//
// canonlab additions, all ordinary metadata that other readers ignore: the writer records XXH64 checksums of
// the data buffer and of the header itself, and the reader validates every structural rule of the format and
// both checksums before returning, so a damaged checkpoint is rejected with a message instead of being
// half-loaded or silently read with changed metadata.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"
#include "io/atomic_file.h"

namespace canonlab {

// Raw bytes are written and read as-is, which is only the format's little-endian layout on such hosts.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

enum class DType { F32, F64, I32, I64 };

const char* dtype_name(DType d);  // the format's spelling: "F32", "F64", "I32", "I64"
size_t dtype_size(DType d);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<double>() { return DType::F64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::I64; }

// Metadata keys owned by the writer; add_metadata() refuses them.
inline constexpr const char* kChecksumKey = "canonlab.data_checksum";   // 16 lowercase hex digits
inline constexpr const char* kChecksumAlgoKey = "canonlab.checksum_algo";  // "xxh64"
inline constexpr const char* kChecksumAlgo = "xxh64";
// XXH64 of the header JSON as written (all N bytes, padding included) with this key's 16 hex digits read as
// "0000000000000000": it covers every metadata entry and every tensor's name, dtype, shape and offsets.
inline constexpr const char* kHeaderChecksumKey = "canonlab.header_checksum";

// XXH64 (seed 0 unless given) as specified by the xxHash project, so the checksum can be recomputed by any
// standard implementation, e.g. Python's `xxhash.xxh64(buf).hexdigest()`.
uint64_t xxh64(std::span<const std::byte> data, uint64_t seed = 0);

// One tensor read from a file. `data` holds the raw little-endian bytes; use copy_to()/to_vector() rather
// than reinterpreting them, which checks dtype and size.
struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // [] for a scalar
  std::vector<std::byte> data;

  size_t numel() const;

  // Copies the values into `out`; throws unless the dtype is T's and out.size() == numel().
  template <class T>
  void copy_to(std::span<T> out) const {
    check_request(dtype_of<T>(), out.size());
    if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
  }
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> v(numel());
    copy_to<T>(v);
    return v;
  }

 private:
  void check_request(DType want, size_t count) const;
};

struct SafetensorsFile {
  std::string path;                             // where it was read from, for messages
  std::map<std::string, std::string> metadata;  // everything in "__metadata__", checksum keys included
  std::vector<TensorEntry> tensors;             // in data-buffer order, i.e. the order they were written
  bool checksum_verified = false;               // false only for files without canonlab checksum metadata
  bool header_checksum_verified = false;        // false for files without kHeaderChecksumKey (older canonlab)

  const TensorEntry* find(const std::string& name) const;
  // Throws canonlab::Error naming the file and the missing tensor.
  const TensorEntry& get(const std::string& name) const;
};

// Reads and fully validates a safetensors file: sizes, JSON, fields, dtypes, shapes against offsets,
// offsets tiling the data buffer exactly, duplicate names, and the data checksum when present. Throws
// canonlab::Error ("checkpoint '<path>' is corrupt: <what>") without returning partial results. Memory use
// is bounded by the real file size; the header is limited to 100 MB like the reference implementation.
SafetensorsFile read_safetensors(const std::string& path);

// Collects tensors and metadata, then writes one file. add() stores a view of the caller's data, not a copy:
// the spans must stay valid until serialize()/write_atomic() returns. Tensors are laid out in the order
// they were added, and the same inputs always produce the same bytes.
class SafetensorsWriter {
 public:
  // Sets a metadata entry (a later call with the same key replaces it). The checksum keys are reserved.
  void add_metadata(std::string key, std::string value);

  // `data` must hold exactly product(shape) values (1 for a scalar, shape {}). Throws on a duplicate or
  // reserved name, a negative dimension or a size mismatch.
  void add(std::string name, std::span<const float> data, std::vector<int64_t> shape);
  void add(std::string name, std::span<const double> data, std::vector<int64_t> shape);
  void add(std::string name, std::span<const int32_t> data, std::vector<int64_t> shape);
  void add(std::string name, std::span<const int64_t> data, std::vector<int64_t> shape);

  // The complete file in memory.
  std::vector<std::byte> serialize() const;
  // Writes the file with write-temp/fsync/rename (see io/atomic_file.h); on failure `path` is unchanged. Returns the
  // data checksum it recorded (kChecksumKey's value), by which another file can name this one.
  std::string write_atomic(const std::string& path, const AtomicWriteOptions& options = {}) const;

 private:
  struct View {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::span<const std::byte> bytes;
  };
  void add_bytes(std::string name, DType dtype, std::span<const std::byte> bytes, size_t count,
                 std::vector<int64_t> shape);
  // XXH64 of the data buffer, as kChecksumKey records it.
  std::string data_checksum() const;
  // The length prefix plus the padded JSON header, both checksums included.
  std::vector<std::byte> header_bytes(const std::string& data_checksum) const;

  std::map<std::string, std::string> metadata_;
  std::vector<View> tensors_;
  std::set<std::string> names_;  // for the duplicate check
};

}  // namespace canonlab
