// The text task on a plain file (read as bytes): splits, training windows, held-out tiling, bits per byte and per
// character, errors. The same task on a prepared data directory: tests/unit/test_text_task_shards.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/text.h"
#include "engine/error.h"

namespace canonlab {
namespace {

// A file whose byte i is i (i < 256), so a window's offset can be read off its tokens.
std::string write_file(const std::string& name, int size) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < size; i++) out.put(char(i % 256));
  return path;
}

TaskConfig text_config(const std::string& path, int context, double heldout_frac) {
  TaskConfig cfg;
  cfg.name = "text";
  cfg.context = context;
  cfg.loss_on = "all";
  cfg.text.path = path;
  cfg.text.heldout_frac = heldout_frac;
  return cfg;
}

std::string error_of(const TaskConfig& cfg) {
  try {
    TextTask task(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TaskText, SplitsAndTrainingWindows) {
  // 200 bytes, 25% held out: training bytes 0..149, held-out bytes 150..199.
  TextTask task(text_config(write_file("canonlab_text_a.bin", 200), 16, 0.25));
  EXPECT_EQ(task.vocab_size(), 256);
  EXPECT_EQ(task.seq_len(), 16);
  EXPECT_EQ(task.training_tokens(), 150u);
  EXPECT_EQ(task.heldout_tokens(), 50u);
  EXPECT_FALSE(task.from_data_directory());
  const Batch b = task.make_batch(2000, 3, 1);
  std::set<int> offsets;
  for (int r = 0; r < b.B; r++) {
    const int o = b.tokens[size_t(r) * 16];
    for (int t = 0; t < 16; t++) {
      const size_t i = size_t(r) * 16 + size_t(t);
      ASSERT_EQ(b.tokens[i], o + t);
      ASSERT_EQ(b.targets[i], o + t + 1);
      ASSERT_EQ(b.loss_mask[i], 1.f);
      ASSERT_EQ(b.score_mask[i], 1.f);
    }
    offsets.insert(o);
  }
  // Offsets 0..133: the last target, byte o + 16, stays in the training split (<= 149); every offset occurs.
  EXPECT_EQ(*offsets.begin(), 0);
  EXPECT_EQ(*offsets.rbegin(), 150 - 16 - 1);
  EXPECT_EQ(int(offsets.size()), 150 - 16);
}

TEST(TaskText, HeldOutTilingCoversTheSplitWithoutOverlap) {
  TextTask task(text_config(write_file("canonlab_text_b.bin", 200), 16, 0.25));
  // Windows need T + 1 bytes: (50 - 1) / 16 = 3 windows at bytes 150, 166, 182 (targets up to 198).
  ASSERT_EQ(task.heldout_windows(), 3);
  std::vector<int> starts, scored, in_loss;
  for (uint64_t i = 0; i < 3; i++) {  // the streams make_eval_batches uses for suite 0, batches of B = 2
    const Batch b = task.make_eval_batch(2, 99, kHeldOutStream + i, 0);
    for (int r = 0; r < 2; r++) {
      starts.push_back(b.tokens[size_t(r) * 16]);
      scored.push_back(int(b.score_mask[size_t(r) * 16]));
      in_loss.push_back(int(b.loss_mask[size_t(r) * 16]));
      for (int t = 0; t < 16; t++) ASSERT_EQ(b.targets[size_t(r) * 16 + size_t(t)], starts.back() + t + 1);
    }
  }
  EXPECT_EQ(starts, (std::vector<int>{150, 166, 182, 150, 166, 182}));  // rows number windows across batches, cycling
  EXPECT_EQ(scored, (std::vector<int>{1, 1, 1, 0, 0, 0}));  // repeats are not scored: each window counts once
  EXPECT_EQ(in_loss, scored) << "nor are they in the held-out loss";
  // The eval windows do not depend on the seed.
  EXPECT_EQ(task.make_eval_batch(2, 1, kHeldOutStream + 1, 0).tokens, task.make_eval_batch(2, 2, kHeldOutStream + 1, 0).tokens);
  // The whole split takes ceil(3 / 2) = 2 batches of 2 rows; the fixed sample takes what it is given.
  EXPECT_EQ(task.eval_batch_count(4, 2), 4);
  TaskConfig whole = text_config(write_file("canonlab_text_b.bin", 200), 16, 0.25);
  whole.text.eval_whole_split = true;
  EXPECT_EQ(TextTask(whole).eval_batch_count(4, 2), 2);
  EXPECT_EQ(TextTask(whole).eval_batch_count(1, 3), 1);

  // Fortunes-sized split: tokens of the first heldout_windows() windows tile one contiguous range, each byte once.
  TextTask big(text_config(write_file("canonlab_text_c.bin", 5000), 64, 0.3));
  const int W = big.heldout_windows();
  ASSERT_EQ(W, int((big.heldout_tokens() - 1) / 64));
  std::set<uint64_t> covered;
  for (int k = 0; k < W; k++) {
    const uint64_t o = big.heldout_window_start(kHeldOutStream + uint64_t(k / 4), uint64_t(k % 4), 4);
    ASSERT_LE(o + 64, big.heldout_tokens() - 1);  // the last target is inside the split
    for (uint64_t t = 0; t < 64; t++) ASSERT_TRUE(covered.insert(o + t).second) << "overlap at token " << o + t;
  }
  EXPECT_EQ(*covered.begin(), 0u);
  EXPECT_EQ(*covered.rbegin(), uint64_t(W) * 64 - 1);
  EXPECT_EQ(covered.size(), size_t(W) * 64);
  EXPECT_LT(big.heldout_tokens() - 1 - uint64_t(W) * 64, 64u) << "fewer than one window is left out";
}

// Bits of each scored target under logits chosen per (vocabulary entry, target); returns {bpc, bpb}.
template <class Logit>
std::pair<double, double> bits_per(const TextTask& task, const Batch& b, Logit logit, MetricSums* out = nullptr) {
  const size_t n = b.tokens.size();
  const int V = task.vocab_size();
  std::vector<float> logits(n * size_t(V));
  for (size_t i = 0; i < n; i++)
    for (int v = 0; v < V; v++) logits[i * size_t(V) + size_t(v)] = logit(v, b.targets[i]);
  MetricSums sums;
  task.score(b, logits.data(), 0, sums);
  if (out) *out = sums;
  return {sums["bpc"].sum / sums["bpc"].count, sums["bpb"].sum / sums["bpb"].count};
}

TEST(TaskText, BitsPerByteAndCharacterOnAscii) {
  // An ASCII file: a byte is a character, so bpb == bpc, and both are the mean bits per scored byte.
  const std::string path = (std::filesystem::temp_directory_path() / "canonlab_text_ascii.txt").string();
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 600; i++) out.put(char('a' + i % 26));
  }
  TextTask task(text_config(path, 32, 0.5));
  const Batch b = task.make_eval_batch(3, 0, kHeldOutStream, 0);
  const size_t n = b.tokens.size();
  MetricSums sums;
  const auto [bpc, bpb] = bits_per(task, b, [](int, int) { return 0.f; }, &sums);
  EXPECT_EQ(sums["bpc"].count, double(n));  // one character per scored byte
  EXPECT_EQ(sums["bpb"].count, double(n));
  EXPECT_NEAR(bpc, 8.0, 1e-9);  // uniform logits: log2 256
  EXPECT_NEAR(bpb, 8.0, 1e-9);
  EXPECT_NEAR(bits_per(task, b, [](int, int) { return 1000.f; }).first, 8.0, 1e-9) << "stable for large logits";
  EXPECT_LT(bits_per(task, b, [](int v, int target) { return v == target ? 60.f : 0.f; }).first, 1e-9);
  // Target logit ln 255 against 255 zeros: p = 1/2, one bit.
  EXPECT_NEAR(bits_per(task, b, [](int v, int target) { return v == target ? float(std::log(255.0)) : 0.f; }).second,
              1.0, 1e-6);
  EXPECT_EQ(task.metric_names(), (std::vector<std::string>{"bpc", "bpb"}));
}

TEST(TaskText, BitsPerCharacterCountsUtf8CodePoints) {
  // "caf\xC3\xA9 " repeated: 6 bytes, 5 characters. Windows of 6 tokens: each scores 6 targets, one period of the
  // text, so with uniform logits bpb = 8 * 6 / 6 = 8 and bpc = 8 * 6 / 5 = 9.6 exactly.
  const std::string path = (std::filesystem::temp_directory_path() / "canonlab_text_utf8.txt").string();
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 200; i++) out << "caf\xC3\xA9 ";
  }
  TextTask task(text_config(path, 6, 0.5));
  ASSERT_EQ(task.heldout_windows(), int((600 - 1) / 6));
  const Batch b = task.make_eval_batch(task.heldout_windows(), 0, kHeldOutStream, 0);
  MetricSums sums;
  const auto [bpc, bpb] = bits_per(task, b, [](int, int) { return 0.f; }, &sums);
  EXPECT_EQ(sums["bpb"].count, 6.0 * task.heldout_windows());
  EXPECT_EQ(sums["bpc"].count, 5.0 * task.heldout_windows());
  EXPECT_NEAR(bpb, 8.0, 1e-9);
  EXPECT_NEAR(bpc, 9.6, 1e-9);
}

TEST(TaskText, Deterministic) {
  TextTask task(text_config(write_file("canonlab_text_e.bin", 3000), 32, 0.1));
  EXPECT_EQ(task.make_batch(8, 5, 7).tokens, task.make_batch(8, 5, 7).tokens);
  EXPECT_NE(task.make_batch(8, 5, 7).tokens, task.make_batch(8, 5, 8).tokens);
  EXPECT_NE(task.make_batch(8, 5, 7).tokens, task.make_batch(8, 6, 7).tokens);
  Batch one;
  one.resize(1, 32);
  task.sample(one, 0, 5, 7, 3);
  const Batch eight = task.make_batch(8, 5, 7);
  EXPECT_TRUE(std::equal(one.tokens.begin(), one.tokens.end(), eight.tokens.begin() + 3 * 32));
}

TEST(TaskText, ErrorsNameTheKey) {
  EXPECT_NE(error_of(text_config("/nonexistent/canonlab.txt", 16, 0.1)).find("task.text.path"), std::string::npos);
  EXPECT_NE(error_of(text_config(std::filesystem::temp_directory_path().string(), 16, 0.1)).find("task.text.path"),
            std::string::npos);
  const std::string small = write_file("canonlab_text_f.bin", 33);  // < 2 * (16 + 1)
  EXPECT_NE(error_of(text_config(small, 16, 0.5)).find("task.text.path"), std::string::npos);
  const std::string file = write_file("canonlab_text_g.bin", 200);
  EXPECT_EQ(error_of(text_config(file, 16, 0.5)), "");
  const std::string few_heldout = error_of(text_config(file, 16, 0.05));  // 10 held-out bytes < 17
  EXPECT_NE(few_heldout.find("task.text.heldout_frac"), std::string::npos);
  EXPECT_NE(few_heldout.find("task.context"), std::string::npos);
  EXPECT_NE(error_of(text_config(file, 16, 0.95)).find("task.text.heldout_frac"), std::string::npos);
  EXPECT_NE(error_of(text_config(file, 190, 0.5)).find("task.context"), std::string::npos);
}

TEST(TaskText, TokenText) {
  TextTask task(text_config(write_file("canonlab_text_h.bin", 100), 8, 0.5));
  EXPECT_EQ(task.token_text('a'), "a");
  EXPECT_EQ(task.token_text('~'), "~");
  EXPECT_EQ(task.token_text(' '), "\xE2\x90\xA3");
  EXPECT_EQ(task.token_text('\n'), "\\n");
  EXPECT_EQ(task.token_text('\t'), "\\x09");
  EXPECT_EQ(task.token_text(0xe9), "\\xe9");
}

TEST(TaskText, FortunesSmoke) {
  const std::string fortunes = "/usr/share/games/fortunes/fortunes";
  if (!std::filesystem::exists(fortunes)) GTEST_SKIP() << fortunes << " is missing (Debian package fortunes-min)";
  TaskConfig cfg;
  cfg.name = "text";
  TextTask task(cfg);  // the defaults: this file, T = 256, 10% held out
  EXPECT_EQ(task.seq_len(), 256);
  const uint64_t size = task.training_tokens() + task.heldout_tokens();
  EXPECT_EQ(size, std::filesystem::file_size(fortunes));
  EXPECT_EQ(task.heldout_windows(), int((task.heldout_tokens() - 1) / 256));
  EXPECT_EQ(task.vocab_size(), 256) << "a plain file has no <eod>";
  EXPECT_EQ(task.resident_bytes() >= double(size), true) << "the file is held in memory";
  EXPECT_GE(task.heldout_windows(), 1);
  const Batch b = task.make_batch(4, 1, 0);
  int printable = 0;
  for (size_t i = 0; i < b.tokens.size(); i++) {
    ASSERT_GE(b.tokens[i], 0);
    ASSERT_LT(b.tokens[i], 256);
    if (i % 256 != 255) {
      ASSERT_EQ(b.targets[i], b.tokens[i + 1]);
    }
    printable += (b.tokens[i] >= ' ' && b.tokens[i] < 0x7f) || b.tokens[i] == '\n';
  }
  EXPECT_GT(printable, int(b.tokens.size()) * 95 / 100) << "English text";
}

}  // namespace
}  // namespace canonlab
