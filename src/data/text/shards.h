#pragma once
// Token shards (docs/text-data.md): a 256-byte little-endian header, then the tokens as flat little-endian uint16
// (vocabularies of at most 65536) or uint32, so that NumPy reads a shard in two lines:
//   n = int(numpy.fromfile(path, dtype="<u8", count=3)[2])                        # the token count
//   tokens = numpy.memmap(path, dtype=numpy.uint16, mode="r", offset=256, shape=(n,))
// Header (byte offset: field):
//   0: magic "CANONTOK"   8: u32 version (1)   12: u32 bytes per token (2 or 4)   16: u64 token count
//   24: u64 tokenizer hash (XXH64 of the tokenizer file, as in the manifest)   32: u32 vocabulary size
//   36..255: zero
// The shards of a split, in order, hold the split's tokens back to back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/atomic_file.h"

namespace canonlab {

inline constexpr size_t kShardHeaderBytes = 256;
inline constexpr char kShardMagic[9] = "CANONTOK";
inline constexpr uint32_t kShardVersion = 1;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;  // 2: uint16, 4: uint32
  uint64_t tokens = 0;
  uint64_t tokenizer_hash = 0;
  uint32_t vocab_size = 0;
};

// A tokenizer hash as the manifest writes it and messages show it: 16 lowercase hex digits.
std::string tokenizer_hash_text(uint64_t hash);

std::vector<std::byte> encode_shard_header(const ShardHeader& header);
// Parses and checks magic, version and token width; errors name `path`.
ShardHeader decode_shard_header(std::span<const std::byte> bytes, const std::string& path);

// Bytes per token for a vocabulary: 2 up to 65536 ids, else 4.
inline uint32_t token_bytes_for(uint64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

struct ShardFile {
  std::string name;  // file name inside the data directory: train_000000.bin
  uint64_t tokens = 0;
};

// Writes the shards of one split, <dir>/<split>_000000.bin, _000001.bin, ... of at most shard_tokens tokens each.
// Tokens stream to disk; each shard is written to a temp file, its header completed, then renamed into place
// (io/atomic_file.h), so a shard under its final name is always whole.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, const ShardHeader& header, uint64_t shard_tokens);
  void append(std::span<const uint32_t> tokens);
  // Publishes the last shard; the writer is finished afterwards. Returns every shard written (none when no token
  // was appended).
  std::vector<ShardFile> finish();
  uint64_t tokens() const { return total_; }

 private:
  void flush();
  void close_shard();

  std::string dir_, split_;
  ShardHeader header_;
  uint64_t shard_tokens_;
  std::unique_ptr<AtomicFileWriter> file_;
  std::vector<std::byte> buffer_;
  uint64_t in_shard_ = 0, total_ = 0;
  std::vector<ShardFile> shards_;
};

// A regular file mapped read-only into memory for the object's lifetime. `what` names it in errors.
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A sequence of tokens read by position: one split of a text.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual uint64_t size() const = 0;
  // Copies tokens [begin, begin + out.size()) to out; throws canonlab::Error on a token outside the vocabulary.
  virtual void read(uint64_t begin, std::span<int> out) const = 0;
};

// The shards of one split, memory-mapped and read as one sequence (a window may span two shards). Each shard's
// header must agree with what the manifest says (token count, width, vocabulary, tokenizer hash), and its size with
// its header; nothing is read until a window asks for it, so opening a corpus of any size takes no time or memory.
class ShardedTokens final : public TokenStream {
 public:
  ShardedTokens(const std::string& dir, const std::vector<ShardFile>& shards, const ShardHeader& expected);
  uint64_t size() const override { return starts_.back(); }
  void read(uint64_t begin, std::span<int> out) const override;

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<uint64_t> starts_;  // starts_[k] = first token of shard k; starts_.back() = the total
  uint32_t token_bytes_ = 2, vocab_size_ = 0;
};

}  // namespace canonlab
