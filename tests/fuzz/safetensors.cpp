// Fuzz target: safetensors bytes -> canonlab::read_safetensors (src/io/safetensors.h), then what
// read_model_config (src/train/checkpoint.cpp) does with the "canonlab.config" metadata. The reader takes a path,
// so the bytes go into a memfd read back through /proc/self/fd/N, a regular file that never touches the disk.
//
// Contract: canonlab::Error is the only way to reject an input, and it comes before anything is returned. A
// file that reads must round-trip: written again by SafetensorsWriter and read back, it has the same tensors
// (names, order, dtypes, shapes, bytes) and metadata, and its checksum verifies.
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "fuzz_support.h"
#include "io/safetensors.h"

namespace {

using canonlab::fuzz::fail;

// An anonymous in-memory file with a path that open() accepts.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("canonlab-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) fail("memfd_create failed");
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  void assign(std::span<const std::byte> bytes) const {
    if (ftruncate(fd_, 0) != 0) fail("ftruncate on the memfd failed");
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = pwrite(fd_, bytes.data() + done, bytes.size() - done, off_t(done));
      if (n <= 0) fail("writing the memfd failed");
      done += size_t(n);
    }
  }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// Typed copies of the tensors, kept alive while the writer holds views of them.
struct TensorCopies {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<double>> f64;
  std::vector<std::vector<int32_t>> i32;
  std::vector<std::vector<int64_t>> i64;

  template <class T>
  void add(canonlab::SafetensorsWriter& writer, std::vector<std::vector<T>>& store, const canonlab::TensorEntry& t) {
    store.push_back(t.to_vector<T>());  // moving a vector into place keeps its buffer, so earlier views stay valid
    writer.add(t.name, std::span<const T>(store.back()), t.shape);
  }
  void add(canonlab::SafetensorsWriter& writer, const canonlab::TensorEntry& t) {
    switch (t.dtype) {
      case canonlab::DType::F32: return add(writer, f32, t);
      case canonlab::DType::F64: return add(writer, f64, t);
      case canonlab::DType::I32: return add(writer, i32, t);
      case canonlab::DType::I64: return add(writer, i64, t);
    }
  }
};

bool writer_reserves(const std::string& key) {
  try {
    canonlab::SafetensorsWriter probe;
    probe.add_metadata(key, "");
    return false;
  } catch (const canonlab::Error&) {
    return true;
  }
}

void check_round_trip(const canonlab::SafetensorsFile& file) {
  using namespace canonlab;
  SafetensorsWriter writer;
  TensorCopies copies;
  std::map<std::string, std::string> kept;  // the metadata the writer takes over; it owns the reserved keys
  try {
    for (const auto& [key, value] : file.metadata)
      if (!writer_reserves(key)) writer.add_metadata(key, value), kept[key] = value;
    for (const TensorEntry& t : file.tensors) copies.add(writer, t);
  } catch (const Error&) {
    return;  // the writer may refuse what the format allows (an empty tensor name); only the reader is under test
  }
  static const MemFile copy;
  copy.assign(writer.serialize());
  SafetensorsFile again;
  try {
    again = read_safetensors(copy.path());
  } catch (const Error& e) {
    fail(std::string("a file the reader accepted, written again by SafetensorsWriter, does not read: ") + e.what());
  }
  fuzz::expect(again.checksum_verified, "the rewritten file's checksum is not verified");
  fuzz::expect(again.tensors.size() == file.tensors.size(), "the rewritten file has a different number of tensors");
  for (size_t i = 0; i < file.tensors.size(); i++) {
    const TensorEntry &a = file.tensors[i], &b = again.tensors[i];
    fuzz::expect(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.data == b.data,
                 "tensor '" + a.name + "' changed in the round trip");
  }
  for (const auto& [key, value] : kept) {
    auto it = again.metadata.find(key);
    fuzz::expect(it != again.metadata.end() && it->second == value, "metadata '" + key + "' changed in the round trip");
  }
  for (const auto& [key, value] : again.metadata)
    fuzz::expect(kept.count(key) || writer_reserves(key), "the round trip added metadata '" + key + "'");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace canonlab;
  static const MemFile input;
  input.assign(std::as_bytes(std::span(data, size)));
  SafetensorsFile file;
  try {
    file = read_safetensors(input.path());
  } catch (const Error&) {
    return 0;
  }
  check_round_trip(file);
  // read_model_config: the metadata's config JSON, whose parse errors it reports as canonlab::Error.
  if (auto it = file.metadata.find("canonlab.config"); it != file.metadata.end()) {
    const nlohmann::json json = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return 0;
    try {
      config_from_json(json);
    } catch (const Error&) {
    }
  }
  return 0;
}
