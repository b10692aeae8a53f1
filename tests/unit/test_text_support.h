#pragma once
// Shared by the natural-text tests: scratch directories, corpora, and a reader of token shards written from the
// format's description (docs/text-data.md) rather than with the code under test.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/rng.h"

namespace canonlab::text_test {

namespace fs = std::filesystem;

// The message of the canonlab::Error that f throws, "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An empty directory of this test's own under the temp directory.
inline std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("canonlab_text_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

inline void write_file(const std::string& path, std::string_view bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_bytes(path)); }

// Every token of a split, in order: its shards as the manifest lists them, each read as "256-byte header, then
// little-endian tokens of the manifest's dtype".
inline std::vector<uint32_t> split_tokens(const std::string& dir, const std::string& split) {
  const nlohmann::json m = read_json(dir + "/manifest.json");
  const size_t width = m["dtype"] == "uint16" ? 2 : 4;
  std::vector<uint32_t> tokens;
  for (const auto& shard : m["splits"][split]["shards"]) {
    const std::string bytes = read_bytes(dir + "/" + shard["file"].get<std::string>());
    uint64_t count = 0;
    std::memcpy(&count, bytes.data() + 16, 8);
    EXPECT_EQ(count, shard["tokens"].get<uint64_t>());
    EXPECT_EQ(bytes.size(), 256 + count * width);
    for (uint64_t i = 0; i < count; i++) {
      uint32_t t = 0;
      std::memcpy(&t, bytes.data() + 256 + i * width, width);
      tokens.push_back(t);
    }
  }
  return tokens;
}

// Text that looks like prose to a tokenizer: sentences of words from a small list, deterministic from the seed.
inline std::string synthetic_prose(uint64_t seed, size_t bytes) {
  static const char* words[] = {"the", "and", "of", "to", "in", "that", "shall", "he", "unto", "his", "lord", "they",
                                "be", "is", "with", "not", "all", "thou", "which", "them", "house", "king", "land",
                                "people", "children", "son", "day", "great", "word", "city", "water", "light"};
  CounterRng rng(seed, 7);
  std::string text;
  while (text.size() < bytes) {
    const int n = 3 + int(rng.below(12));
    for (int w = 0; w < n; w++) {
      std::string word = words[rng.below(std::size(words))];
      if (w == 0) word[0] = char(word[0] - 'a' + 'A');
      text += (w ? " " : "") + word;
    }
    text += rng.below(4) == 0 ? ".\n" : ". ";
  }
  text.resize(bytes);
  return text;
}

// The King James Bible (Debian package bible-kjv) from `first` to `last` (e.g. "Gen1:1", "Gen50:26"), as plain text:
// one chapter per paragraph, "Genesis 1\n1 In the beginning ...\n2 ...", chapters separated by a blank line.
// The same pipeline as docs/tasks/text.md. Fails the test when the bible program is missing.
inline std::string kjv_text(const std::string& first, const std::string& last) {
  if (std::system("command -v bible > /dev/null 2>&1") != 0) {
    ADD_FAILURE() << "the bible program is missing: scripts/install-deps.sh installs the Debian package bible-kjv";
    return "";
  }
  const std::string path = (fs::temp_directory_path() / ("canonlab_kjv_" + first + "_" + last + ".txt")).string();
  const std::string cmd = "bible -l 100000 " + first + "-" + last + " | sed -e 1d -e '/^[^ ]/{n;d}' -e 's/^  //' > " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return read_bytes(path);
}

}  // namespace canonlab::text_test
