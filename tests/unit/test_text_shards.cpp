// Token shards: the header layout the docs promise, shards of bounded size read back as one sequence across their
// boundaries, both token widths, atomic publication, and the damage a reader must refuse.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "data/text/shards.h"
#include "engine/error.h"
#include "test_text_support.h"

namespace canonlab {
namespace {

using text_test::error_of;
using text_test::fresh_dir;
using text_test::read_bytes;
using text_test::write_file;

ShardHeader header(uint32_t vocab) {
  ShardHeader h;
  h.token_bytes = token_bytes_for(vocab);
  h.vocab_size = vocab;
  h.tokenizer_hash = 0x0123456789abcdefULL;
  return h;
}

std::vector<uint32_t> iota_tokens(size_t n, uint32_t modulo) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = uint32_t((i * 7919) % modulo);
  return t;
}

TEST(TextShards, HeaderLayoutIsTheDocumentedOne) {
  ShardHeader h = header(300);
  h.tokens = 0x1122334455ULL;
  const std::vector<std::byte> b = encode_shard_header(h);
  ASSERT_EQ(b.size(), 256u);
  EXPECT_EQ(std::memcmp(b.data(), "CANONTOK", 8), 0);
  const auto u32 = [&](size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  const auto u64 = [&](size_t at) {
    uint64_t v = 0;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);   // version
  EXPECT_EQ(u32(12), 2u);  // bytes per token
  EXPECT_EQ(u64(16), 0x1122334455ULL);
  EXPECT_EQ(u64(24), 0x0123456789abcdefULL);
  EXPECT_EQ(u32(32), 300u);  // vocabulary
  for (size_t i = 36; i < 256; i++) ASSERT_EQ(b[i], std::byte{0});
  const ShardHeader back = decode_shard_header(b, "x");
  EXPECT_EQ(back.tokens, h.tokens);
  EXPECT_EQ(back.tokenizer_hash, h.tokenizer_hash);
  EXPECT_EQ(token_bytes_for(65536), 2u);
  EXPECT_EQ(token_bytes_for(65537), 4u);
}

TEST(TextShards, BoundedShardsReadBackAsOneSequence) {
  for (const uint32_t vocab : {300u, 70000u}) {
    const std::string dir = fresh_dir("shards_" + std::to_string(vocab));
    const std::vector<uint32_t> tokens = iota_tokens(2500, vocab);
    ShardWriter writer(dir, "train", header(vocab), 1000);
    writer.append(std::span(tokens).first(1));
    writer.append(std::span(tokens).subspan(1, 1500));  // crosses a shard boundary inside one append
    writer.append(std::span(tokens).subspan(1501));
    const std::vector<ShardFile> shards = writer.finish();
    ASSERT_EQ(shards.size(), 3u);
    EXPECT_EQ(shards[0].name, "train_000000.bin");
    EXPECT_EQ(shards[2].name, "train_000002.bin");
    EXPECT_EQ(shards[0].tokens, 1000u);
    EXPECT_EQ(shards[2].tokens, 500u);
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "left behind: " << entry.path();
    // The file is exactly header + tokens, little-endian of the right width.
    const std::string raw = read_bytes(dir + "/train_000001.bin");
    const size_t width = vocab <= 65536 ? 2 : 4;
    ASSERT_EQ(raw.size(), 256 + 1000 * width);
    uint32_t first = 0;
    std::memcpy(&first, raw.data() + 256, width);
    EXPECT_EQ(first, tokens[1000]);

    const ShardedTokens split(dir, shards, header(vocab));
    ASSERT_EQ(split.size(), 2500u);
    std::vector<int> all(2500);
    split.read(0, all);
    for (size_t i = 0; i < 2500; i++) ASSERT_EQ(uint32_t(all[i]), tokens[i]);
    std::vector<int> across(30);
    split.read(985, across);  // shard 0's last 15 tokens and shard 1's first 15
    for (size_t i = 0; i < 30; i++) ASSERT_EQ(uint32_t(across[i]), tokens[985 + i]);
    std::vector<int> past(10);
    EXPECT_THROW(split.read(2495, past), Error);
  }
}

TEST(TextShards, AnUnfinishedShardIsNeverPublished) {
  const std::string dir = fresh_dir("shards_unfinished");
  {
    ShardWriter writer(dir, "val", header(300), 100);
    writer.append(iota_tokens(150, 300));  // shard 0 complete, shard 1 half written; then the writer dies
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/val_000000.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/val_000001.bin"));
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "left behind: " << entry.path();
}

TEST(TextShards, DamageIsRefusedWithTheFileNamed) {
  const std::string dir = fresh_dir("shards_damage");
  ShardWriter writer(dir, "train", header(300), 1000);
  writer.append(iota_tokens(400, 300));
  const std::vector<ShardFile> shards = writer.finish();
  const std::string path = dir + "/train_000000.bin", good = read_bytes(path);
  const auto open = [&] { ShardedTokens split(dir, shards, header(300)); };
  ASSERT_EQ(error_of(open), "");

  write_file(path, good.substr(0, good.size() - 2));
  EXPECT_NE(error_of(open).find("truncated"), std::string::npos) << error_of(open);
  write_file(path, "XANONTOK" + good.substr(8));
  EXPECT_NE(error_of(open).find("CANONTOK"), std::string::npos);
  write_file(path, good.substr(0, 100));
  EXPECT_NE(error_of(open).find(path), std::string::npos);
  write_file(path, good);
  std::vector<ShardFile> other = shards;
  other[0].tokens = 399;  // the manifest disagrees with the header
  EXPECT_NE(error_of([&] { ShardedTokens s(dir, other, header(300)); }).find("manifest"), std::string::npos);
  ShardHeader foreign = header(300);
  foreign.tokenizer_hash ^= 1;
  EXPECT_NE(error_of([&] { ShardedTokens s(dir, shards, foreign); }).find("another tokenizer"), std::string::npos);
  EXPECT_NE(error_of([&] { ShardedTokens s(dir, {{"missing.bin", 5}}, header(300)); }).find("missing.bin"),
            std::string::npos);

  // A token outside the vocabulary is found when a window reads it.
  std::string bad = good;
  const uint16_t huge = 301;
  std::memcpy(bad.data() + 256 + 2 * 200, &huge, 2);
  write_file(path, bad);
  const ShardedTokens split(dir, shards, header(300));
  std::vector<int> window(10);
  EXPECT_NO_THROW(split.read(0, window));
  EXPECT_NE(error_of([&] { split.read(195, window); }).find("outside the vocabulary"), std::string::npos);
}

// Issue 25: a shard of another tokenizer with the same vocabulary size and token width used to be reported as
// "another tokenizer (vocabulary 300, 2 bytes per token) than the manifest's (vocabulary 300, 2)": both sides equal.
// The message names the field that differs, with both values, and only that field.
TEST(TextShards, ATokenizerMismatchShowsBothDifferingValues) {
  const std::string dir = fresh_dir("shards_foreign");
  ShardWriter writer(dir, "train", header(300), 1000);
  writer.append(iota_tokens(400, 300));
  const std::vector<ShardFile> shards = writer.finish();
  ShardHeader foreign = header(300);
  foreign.tokenizer_hash = 0xfedcba9876543210ULL;
  const std::string message = error_of([&] { ShardedTokens s(dir, shards, foreign); });
  EXPECT_NE(message.find("tokenizer XXH64 0123456789abcdef, the manifest's fedcba9876543210"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("vocabulary"), std::string::npos) << message;
  foreign.vocab_size = 70000;
  foreign.token_bytes = 4;
  const std::string all = error_of([&] { ShardedTokens s(dir, shards, foreign); });
  EXPECT_NE(all.find("; vocabulary 300, the manifest's 70000; bytes per token 2, the manifest's 4"), std::string::npos)
      << all;
}

}  // namespace
}  // namespace canonlab
