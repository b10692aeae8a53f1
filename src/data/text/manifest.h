#pragma once
// manifest.json of a prepared text directory (docs/text-data.md): the tokenizer, and per split its documents,
// bytes, characters, tokens and shard files. `canonlab data prepare` writes it last, so a directory with a
// manifest is complete; the text task reads it strictly (every field typed and consistent, every shard name one
// the writer would give) before it maps a shard.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/text/shards.h"

namespace canonlab {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kTokenizerFileName = "tokenizer.model";
inline constexpr int kManifestVersion = 1;

struct SplitCounts {
  uint64_t documents = 0;
  uint64_t bytes = 0;       // the documents' bytes (a --doc-delimiter between them is not part of either)
  uint64_t characters = 0;  // utf8::count_characters of those bytes
  uint64_t tokens = 0;      // including one <eod> per document when the tokenizer has one
  std::vector<ShardFile> shards;
};

struct Manifest {
  std::string tokenizer;       // "bytes", "bpe:4096", "unigram:8000" or the path of the .model file it came from
  std::string tokenizer_file;  // kTokenizerFileName, or empty for bytes
  uint64_t tokenizer_hash = 0; // XXH64 of the tokenizer file (Tokenizer::hash)
  int vocab_size = 0;
  int eod_id = -1;             // -1: no end-of-document token
  uint32_t token_bytes = 2;
  SplitCounts train, val;
  nlohmann::json prepare;      // how the directory was made (inputs, seed, ...); informational
};

std::string manifest_to_json(const Manifest& m);
// Reads <dir>/manifest.json. Errors name the file and the field.
Manifest read_manifest(const std::string& dir);

// The header every shard of this manifest must have (without its token count).
ShardHeader shard_header_of(const Manifest& m);

}  // namespace canonlab
