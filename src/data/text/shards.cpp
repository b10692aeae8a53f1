#include "data/text/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/error.h"

namespace canonlab {

static_assert(std::endian::native == std::endian::little, "token shards are read and written as little-endian");

namespace {

template <class T>
void put(std::vector<std::byte>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}
template <class T>
T get(std::span<const std::byte> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

std::string shard_name(const std::string& split, size_t index) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%06zu.bin", split.c_str(), index);
  return name;
}

// What a shard's header says about its tokenizer where it differs from the manifest ("tokenizer XXH64 ...,
// the manifest's ..."): every field is named with both values, so the message never shows two equal sides.
std::string tokenizer_difference(const ShardHeader& shard, const ShardHeader& manifest) {
  std::string out;
  auto differs = [&](const std::string& what, const std::string& mine, const std::string& theirs) {
    if (mine != theirs) out += (out.empty() ? "" : "; ") + what + " " + mine + ", the manifest's " + theirs;
  };
  differs("tokenizer XXH64", tokenizer_hash_text(shard.tokenizer_hash), tokenizer_hash_text(manifest.tokenizer_hash));
  differs("vocabulary", std::to_string(shard.vocab_size), std::to_string(manifest.vocab_size));
  differs("bytes per token", std::to_string(shard.token_bytes), std::to_string(manifest.token_bytes));
  return out;
}

}  // namespace

std::string tokenizer_hash_text(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::vector<std::byte> encode_shard_header(const ShardHeader& h) {
  std::vector<std::byte> out(kShardHeaderBytes, std::byte{0});
  std::memcpy(out.data(), kShardMagic, 8);
  put(out, 8, h.version);
  put(out, 12, h.token_bytes);
  put(out, 16, h.tokens);
  put(out, 24, h.tokenizer_hash);
  put(out, 32, h.vocab_size);
  return out;
}

ShardHeader decode_shard_header(std::span<const std::byte> bytes, const std::string& path) {
  const std::string bad = "token shard '" + path + "' is damaged or not a shard: ";
  CANONLAB_CHECK(bytes.size() >= kShardHeaderBytes, bad + "it has " + std::to_string(bytes.size()) +
                                                        " bytes, fewer than the " + std::to_string(kShardHeaderBytes) +
                                                        "-byte header");
  CANONLAB_CHECK(std::memcmp(bytes.data(), kShardMagic, 8) == 0, bad + "it does not start with \"CANONTOK\"");
  ShardHeader h;
  h.version = get<uint32_t>(bytes, 8);
  h.token_bytes = get<uint32_t>(bytes, 12);
  h.tokens = get<uint64_t>(bytes, 16);
  h.tokenizer_hash = get<uint64_t>(bytes, 24);
  h.vocab_size = get<uint32_t>(bytes, 32);
  CANONLAB_CHECK(h.version == kShardVersion, bad + "format version " + std::to_string(h.version) +
                                                 "; allowed: " + std::to_string(kShardVersion));
  CANONLAB_CHECK(h.token_bytes == 2 || h.token_bytes == 4,
                 bad + "bytes per token " + std::to_string(h.token_bytes) + "; allowed: 2 or 4");
  return h;
}

ShardWriter::ShardWriter(std::string dir, std::string split, const ShardHeader& header, uint64_t shard_tokens)
    : dir_(std::move(dir)), split_(std::move(split)), header_(header), shard_tokens_(shard_tokens) {
  CANONLAB_CHECK(shard_tokens_ > 0, "shard size must be at least one token");
}

void ShardWriter::append(std::span<const uint32_t> tokens) {
  while (!tokens.empty()) {
    if (!file_) {
      file_ = std::make_unique<AtomicFileWriter>(dir_ + "/" + shard_name(split_, shards_.size()));
      file_->write(encode_shard_header(header_));  // the token count is filled in by close_shard
      in_shard_ = 0;
    }
    const size_t n = size_t(std::min<uint64_t>(tokens.size(), shard_tokens_ - in_shard_));
    size_t at = buffer_.size();
    buffer_.resize(at + n * header_.token_bytes);
    for (uint32_t t : tokens.first(n)) {
      if (header_.token_bytes == 2) {
        const uint16_t narrow = uint16_t(t);  // ids of a vocabulary of at most 65536
        std::memcpy(buffer_.data() + at, &narrow, 2);
      } else {
        std::memcpy(buffer_.data() + at, &t, 4);
      }
      at += header_.token_bytes;
    }
    in_shard_ += n;
    total_ += n;
    tokens = tokens.subspan(n);
    if (buffer_.size() >= (size_t(1) << 20)) flush();
    if (in_shard_ == shard_tokens_) close_shard();
  }
}

void ShardWriter::flush() {
  if (file_ && !buffer_.empty()) file_->write(buffer_);
  buffer_.clear();
}

void ShardWriter::close_shard() {
  flush();
  ShardHeader header = header_;
  header.tokens = in_shard_;
  const std::vector<std::byte> bytes = encode_shard_header(header);
  // The writer streams sequentially; the count is only known now, so the header is rewritten in place through a
  // second descriptor of the same temp file before commit() fsyncs (fsync covers the file, not the descriptor).
  const int fd = ::open(file_->temp_path().c_str(), O_WRONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::pwrite(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw Error("cannot write '" + file_->path() + "': cannot complete its header: " + std::strerror(err));
  file_->commit();
  shards_.push_back({shard_name(split_, shards_.size()), in_shard_});
  file_.reset();
}

std::vector<ShardFile> ShardWriter::finish() {
  if (file_) close_shard();
  return shards_;
}

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  const std::string cannot = "cannot read " + what + " '" + path + "': ";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(cannot + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw Error(cannot + (dir ? "it is a directory" : "not a regular file") + "; allowed: a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      data_ = nullptr;
      ::close(fd);
      throw Error(cannot + "mmap failed: " + std::strerror(err));
    }
  }
  ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

ShardedTokens::ShardedTokens(const std::string& dir, const std::vector<ShardFile>& shards, const ShardHeader& expected)
    : starts_{0}, token_bytes_(expected.token_bytes), vocab_size_(expected.vocab_size) {
  for (const ShardFile& shard : shards) {
    const std::string path = dir + "/" + shard.name;
    auto file = std::make_unique<MappedFile>(path, "token shard");
    const ShardHeader h = decode_shard_header(file->bytes(), path);
    const std::string bad = "token shard '" + path + "' does not belong to " + dir + "/manifest.json: ";
    CANONLAB_CHECK(h.tokens == shard.tokens, bad + "its header holds " + std::to_string(h.tokens) +
                                                 " tokens, the manifest " + std::to_string(shard.tokens));
    const std::string difference = tokenizer_difference(h, expected);
    CANONLAB_CHECK(difference.empty(), bad + "its header names another tokenizer than the manifest: " + difference);
    const uint64_t want = kShardHeaderBytes + h.tokens * h.token_bytes;
    CANONLAB_CHECK(file->bytes().size() == want, "token shard '" + path + "' is damaged: it has " +
                                                     std::to_string(file->bytes().size()) + " bytes, its header says " +
                                                     std::to_string(want) + " (was it truncated?)");
    starts_.push_back(starts_.back() + h.tokens);
    files_.push_back(std::move(file));
  }
}

void ShardedTokens::read(uint64_t begin, std::span<int> out) const {
  CANONLAB_CHECK(begin + out.size() <= size(), "token window [" + std::to_string(begin) + ", " +
                                                   std::to_string(begin + out.size()) + ") is outside the " +
                                                   std::to_string(size()) + " tokens of the split");
  // The shard holding `begin`: the last one starting at or before it.
  size_t k = size_t(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  size_t done = 0;
  while (done < out.size()) {
    while (begin + done >= starts_[k + 1]) k++;  // skip to the next shard (and past empty ones)
    const std::byte* data = files_[k]->bytes().data() + kShardHeaderBytes;
    const uint64_t local = begin + done - starts_[k];
    const size_t n = size_t(std::min<uint64_t>(out.size() - done, starts_[k + 1] - (begin + done)));
    for (size_t i = 0; i < n; i++) {
      uint32_t token = 0;
      std::memcpy(&token, data + (local + i) * token_bytes_, token_bytes_);
      CANONLAB_CHECK(token < vocab_size_, "token shard '" + files_[k]->path() + "' is damaged: token " +
                                              std::to_string(local + i) + " is " + std::to_string(token) +
                                              ", outside the vocabulary of " + std::to_string(vocab_size_));
      out[done + i] = int(token);
    }
    done += n;
  }
}

}  // namespace canonlab
