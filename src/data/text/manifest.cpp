#include "data/text/manifest.h"

#include <cstdio>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/json_read.h"

namespace canonlab {
namespace {

// A manifest lists one entry per shard (100M tokens by default); 16 MiB is room for exabytes of text.
constexpr uint64_t kMaxManifestBytes = uint64_t(16) << 20;
constexpr int kMaxManifestDepth = 8;  // top object, splits, a split, its shards, a shard: 4 deep
constexpr int64_t kMaxVocab = int64_t(1) << 24;  // model.vocab_size's bound (config/schema.cpp)

nlohmann::json split_json(const SplitCounts& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardFile& f : s.shards) shards.push_back({{"file", f.name}, {"tokens", f.tokens}});
  return {{"documents", s.documents}, {"bytes", s.bytes}, {"characters", s.characters}, {"tokens", s.tokens},
          {"shards", shards}};
}

// Reads one field strictly: the right JSON type, integers in range (nlohmann's get<> would turn 1.5 into 1).
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  const nlohmann::json& field(const nlohmann::json& object, const std::string& key, const std::string& where) const {
    if (!object.is_object()) fail(where, "is " + std::string(object.type_name()) + ", not an object");
    const auto it = object.find(key);
    if (it == object.end()) fail(where.empty() ? key : where + "." + key, "is missing");
    return *it;
  }
  uint64_t count(const nlohmann::json& object, const std::string& key, const std::string& where, uint64_t lo = 0,
                 uint64_t hi = UINT64_MAX) const {
    const nlohmann::json& v = field(object, key, where);
    const std::string name = where.empty() ? key : where + "." + key;
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(name, "is " + brief(v, 40) + "; allowed: a whole number >= 0");
    const uint64_t n = v.get<uint64_t>();
    if (n < lo || n > hi) fail(name, "is " + std::to_string(n) + "; allowed: " + std::to_string(lo) + " to " + std::to_string(hi));
    return n;
  }
  std::string text(const nlohmann::json& object, const std::string& key, const std::string& where) const {
    const nlohmann::json& v = field(object, key, where);
    if (!v.is_string()) fail(where.empty() ? key : where + "." + key, "is " + brief(v, 40) + ", not a string");
    return v.get<std::string>();
  }
  [[noreturn]] void fail(const std::string& name, const std::string& problem) const {
    throw Error("text data manifest '" + path_ + "': " + name + " " + problem +
                " (rerun canonlab data prepare to rebuild the directory)");
  }

 private:
  std::string path_;
};

SplitCounts read_split(const Reader& r, const nlohmann::json& splits, const std::string& name) {
  const std::string where = "splits." + name;
  const nlohmann::json& j = r.field(splits, name, "splits");
  SplitCounts s;
  s.documents = r.count(j, "documents", where, 1);
  s.bytes = r.count(j, "bytes", where, 1);
  s.characters = r.count(j, "characters", where);
  s.tokens = r.count(j, "tokens", where, 1);
  const nlohmann::json& shards = r.field(j, "shards", where);
  if (!shards.is_array() || shards.empty()) r.fail(where + ".shards", "is not a non-empty list");
  uint64_t total = 0;
  for (size_t k = 0; k < shards.size(); k++) {
    const std::string at = where + ".shards[" + std::to_string(k) + "]";
    ShardFile f{r.text(shards[k], "file", at), r.count(shards[k], "tokens", at, 1)};
    char expected[64];
    std::snprintf(expected, sizeof expected, "%s_%06zu.bin", name.c_str(), k);
    // Only the names the writer gives: a manifest cannot point outside its directory.
    if (f.name != expected) r.fail(at + ".file", "is '" + f.name + "'; allowed: '" + expected + "'");
    total += f.tokens;
    s.shards.push_back(std::move(f));
  }
  if (total != s.tokens)
    r.fail(where + ".tokens", "is " + std::to_string(s.tokens) + " but its shards hold " + std::to_string(total));
  return s;
}

}  // namespace

ShardHeader shard_header_of(const Manifest& m) {
  ShardHeader h;
  h.token_bytes = m.token_bytes;
  h.tokenizer_hash = m.tokenizer_hash;
  h.vocab_size = uint32_t(m.vocab_size);
  return h;
}

std::string manifest_to_json(const Manifest& m) {
  nlohmann::json j;
  j["format"] = "canonlab text data";
  j["version"] = kManifestVersion;
  j["tokenizer"] = {{"name", m.tokenizer},
                    {"file", m.tokenizer_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.tokenizer_file)},
                    {"xxh64", tokenizer_hash_text(m.tokenizer_hash)},
                    {"vocab_size", m.vocab_size},
                    {"eod_id", m.eod_id < 0 ? nlohmann::json(nullptr) : nlohmann::json(m.eod_id)}};
  j["dtype"] = m.token_bytes == 2 ? "uint16" : "uint32";
  j["header_bytes"] = kShardHeaderBytes;
  j["splits"] = {{"train", split_json(m.train)}, {"val", split_json(m.val)}};
  j["prepare"] = m.prepare;
  // Paths and the delimiter are bytes, not necessarily UTF-8; JSON needs UTF-8, so they are written with U+FFFD.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  const std::string text = read_text_file(path, kMaxManifestBytes, "text data manifest");
  const nlohmann::json j = parse_json(text, "text data manifest '" + path + "'", kMaxManifestDepth);
  const Reader r(path);
  if (r.text(j, "format", "") != "canonlab text data") r.fail("format", "is not 'canonlab text data'");
  if (r.count(j, "version", "") != uint64_t(kManifestVersion))
    r.fail("version", "is not " + std::to_string(kManifestVersion) + ", the version this canonlab reads");
  Manifest m;
  const nlohmann::json& tok = r.field(j, "tokenizer", "");
  m.tokenizer = r.text(tok, "name", "tokenizer");
  const nlohmann::json& file = r.field(tok, "file", "tokenizer");
  if (!file.is_null()) {
    m.tokenizer_file = r.text(tok, "file", "tokenizer");
    if (m.tokenizer_file != kTokenizerFileName)
      r.fail("tokenizer.file", "is '" + m.tokenizer_file + "'; allowed: null or '" + kTokenizerFileName + "'");
  }
  const std::string hash = r.text(tok, "xxh64", "tokenizer");
  if (hash.size() != 16 || hash.find_first_not_of("0123456789abcdef") != std::string::npos)
    r.fail("tokenizer.xxh64", "is '" + hash + "'; allowed: 16 lowercase hex digits");
  m.tokenizer_hash = std::stoull(hash, nullptr, 16);
  m.vocab_size = int(r.count(tok, "vocab_size", "tokenizer", 1, kMaxVocab));
  const nlohmann::json& eod = r.field(tok, "eod_id", "tokenizer");
  m.eod_id = eod.is_null() ? -1 : int(r.count(tok, "eod_id", "tokenizer", 0, uint64_t(m.vocab_size - 1)));
  const std::string dtype = r.text(j, "dtype", "");
  m.token_bytes = token_bytes_for(uint64_t(m.vocab_size));
  if (dtype != (m.token_bytes == 2 ? "uint16" : "uint32"))
    r.fail("dtype", "is '" + dtype + "'; a vocabulary of " + std::to_string(m.vocab_size) + " is stored as " +
                        (m.token_bytes == 2 ? "uint16" : "uint32"));
  if (r.count(j, "header_bytes", "") != kShardHeaderBytes)
    r.fail("header_bytes", "is not " + std::to_string(kShardHeaderBytes));
  const nlohmann::json& splits = r.field(j, "splits", "");
  m.train = read_split(r, splits, "train");
  m.val = read_split(r, splits, "val");
  if (j.contains("prepare")) m.prepare = j["prepare"];
  return m;
}

}  // namespace canonlab
