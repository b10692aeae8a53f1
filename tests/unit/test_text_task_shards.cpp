// The text task over a prepared data directory: vocabulary from the manifest, training windows at uniform offsets of
// the train split (across shards), the held-out tiling, bpb and bpc against hand-computed values, the whole-split
// evaluation, the memory estimate, and a damaged or foreign directory refused with task.text.path named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "config/config.h"
#include "data/text.h"
#include "data/text/prepare.h"
#include "engine/error.h"
#include "eval/evaluate.h"
#include "test_text_support.h"
#include "train/resource_estimate.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using text_test::error_of;
using text_test::fresh_dir;
using text_test::read_bytes;
using text_test::split_tokens;
using text_test::synthetic_prose;
using text_test::write_file;

TaskConfig task_config(const std::string& dir, int context) {
  TaskConfig cfg;
  cfg.name = "text";
  cfg.context = context;
  cfg.loss_on = "all";
  cfg.text.path = dir;
  return cfg;
}

std::string prepare(const std::string& name, const std::vector<std::string>& documents, const std::string& tokenizer,
                    uint64_t shard_tokens = 1000) {
  const std::string corpus = fresh_dir(name + "_corpus"), out = fresh_dir(name + "_data");
  for (size_t d = 0; d < documents.size(); d++) write_file(corpus + "/doc" + std::to_string(1000 + d), documents[d]);
  PrepareOptions o;
  o.inputs = {corpus};
  o.tokenizer = tokenizer;
  o.out = out;
  o.val_fraction = 0.3;
  o.shard_tokens = shard_tokens;
  o.progress = false;
  prepare_text_data(o);
  return out;
}

std::vector<std::string> prose_documents(int n) {
  std::vector<std::string> docs;
  for (int d = 0; d < n; d++) docs.push_back(synthetic_prose(uint64_t(d), 1500 + 37 * size_t(d)));
  return docs;
}

TEST(TextTaskShards, TrainingWindowsAreUniformOffsetsOfTheTrainSplit) {
  const std::string dir = prepare("windows", prose_documents(20), "bpe:300", 700);
  const TextTask task(task_config(dir, 32));
  const std::vector<uint32_t> train = split_tokens(dir, "train"), val = split_tokens(dir, "val");
  EXPECT_TRUE(task.from_data_directory());
  EXPECT_EQ(task.vocab_size(), 300);
  EXPECT_EQ(task.training_tokens(), train.size());
  EXPECT_EQ(task.heldout_tokens(), val.size());
  const Batch b = task.make_batch(3000, 9, 4);
  std::set<uint64_t> starts;
  for (int r = 0; r < b.B; r++) {
    const uint64_t o = task.training_window_start(9, 4, uint64_t(r));
    ASSERT_LE(o + 32, train.size() - 1);
    for (int t = 0; t < 32; t++) {
      ASSERT_EQ(uint32_t(b.tokens[size_t(r) * 32 + size_t(t)]), train[o + size_t(t)]);
      ASSERT_EQ(uint32_t(b.targets[size_t(r) * 32 + size_t(t)]), train[o + size_t(t) + 1]);
    }
    starts.insert(o);
  }
  // Spread over the whole split, shards included (700 tokens each).
  EXPECT_LT(*starts.begin(), train.size() / 20);
  EXPECT_GT(*starts.rbegin(), train.size() - train.size() / 20);
  // The held-out tiling: window k starts at token 32 k of the val split.
  const Batch e = task.make_eval_batch(4, 0, kHeldOutStream + 1, 0);
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < 32; t++) ASSERT_EQ(uint32_t(e.tokens[size_t(r) * 32 + size_t(t)]), val[size_t(4 + r) * 32 + size_t(t)]);
  EXPECT_EQ(task.token_text(1), "<eod>");
}

TEST(TextTaskShards, BitsPerByteAndCharacterAreHandComputable) {
  // Bytes tokenizer with <eod> (V = 257); every document is "ab\xC3\xA9cd": 6 bytes, 5 characters, 7 tokens. With
  // T = 7 each held-out window scores 7 targets covering one document's 6 bytes and its <eod>, so uniform logits give
  // bpb = log2(257) * 7 / 6 and bpc = log2(257) * 7 / 5.
  const std::string dir = prepare("handbits", std::vector<std::string>(40, "ab\xC3\xA9" "cd"), "bytes");
  const TextTask task(task_config(dir, 7));
  ASSERT_EQ(task.vocab_size(), 257);
  const int W = task.heldout_windows();
  ASSERT_GE(W, 3);
  const Batch b = task.make_eval_batch(W + 2, 0, kHeldOutStream, 0);  // two rows past the end: not scored
  std::vector<float> logits(b.tokens.size() * 257, 0.f);
  MetricSums sums;
  task.score(b, logits.data(), 0, sums);
  EXPECT_EQ(sums["bpb"].count, 6.0 * W);
  EXPECT_EQ(sums["bpc"].count, 5.0 * W);
  EXPECT_NEAR(sums["bpb"].sum / sums["bpb"].count, std::log2(257.0) * 7 / 6, 1e-9);
  EXPECT_NEAR(sums["bpc"].sum / sums["bpc"].count, std::log2(257.0) * 7 / 5, 1e-9);

  // BPE: uniform logits give log2(V) * scored tokens / the bytes those tokens decode to.
  const std::string bpe = prepare("handbits_bpe", prose_documents(12), "bpe:320");
  const TextTask t2(task_config(bpe, 16));
  const std::vector<uint32_t> val = split_tokens(bpe, "val");
  const int W2 = t2.heldout_windows();
  const Batch b2 = t2.make_eval_batch(W2, 0, kHeldOutStream, 0);
  std::vector<float> zeros(b2.tokens.size() * 320, 0.f);
  MetricSums s2;
  t2.score(b2, zeros.data(), 0, s2);
  const std::vector<uint32_t> scored(val.begin() + 1, val.begin() + 1 + 16 * W2);  // targets of the tiling
  const std::string text = t2.tokenizer().decode(scored);
  uint64_t characters = 0;
  for (unsigned char c : text) characters += (c & 0xC0) != 0x80;
  EXPECT_NEAR(s2["bpb"].sum / s2["bpb"].count, std::log2(320.0) * double(scored.size()) / double(text.size()), 1e-9);
  EXPECT_NEAR(s2["bpc"].sum / s2["bpc"].count, std::log2(320.0) * double(scored.size()) / double(characters), 1e-9);
  EXPECT_GT(double(text.size()) / double(scored.size()), 1.5) << "BPE tokens cover several bytes";
}

TEST(TextTaskShards, WholeSplitEvaluationScoresEveryWindowOnce) {
  const std::string dir = prepare("whole", prose_documents(20), "bytes", 100000);
  TaskConfig cfg = task_config(dir, 64);
  cfg.text.eval_whole_split = true;
  const TextTask task(cfg);
  const int W = task.heldout_windows(), B = 5;
  ASSERT_EQ(task.eval_batch_count(2, B), (W + B - 1) / B);
  // The batches the trainer evaluates on (make_eval_batches), not train.eval_batches = 2 of them.
  RunConfig run;
  run.task = cfg;
  run.train.eval_batches = 2;
  run.train.batch_size = B;
  const std::vector<EvalBatch> batches = make_eval_batches(task, run);
  ASSERT_EQ(int(batches.size()), (W + B - 1) / B);
  int scored_rows = 0;
  for (const EvalBatch& eb : batches)
    for (int r = 0; r < B; r++) scored_rows += eb.batch.score_mask[size_t(r) * 64] != 0.f;
  EXPECT_EQ(scored_rows, W);
}

TEST(TextTaskShards, ConfigsResolveAndTheMemoryEstimateCountsNoShards) {
  const std::string dir = prepare("config", prose_documents(20), "bpe:300", 100000);
  const RunConfig cfg = config_from_yaml_string("task: {name: text, context: 64, text: {path: " + dir +
                                                "}}\nmodel: {d_model: 32, n_layers: 1, n_heads: 2}\n");
  EXPECT_EQ(cfg.model.vocab_size, 300) << "the vocabulary comes from the manifest";
  const ResourceEstimate e = estimate_resources(cfg);
  bool found = false;
  for (const MemoryItem& item : e.items)
    if (item.what.find("task data") != std::string::npos) {
      found = true;
      EXPECT_LT(item.bytes, 1e6) << item.what;  // tables of 300 tokens, not the shards
      EXPECT_NE(item.what.find("memory-mapped"), std::string::npos);
    }
  EXPECT_TRUE(found);
}

TEST(TextTaskShards, DamagedOrForeignDirectoriesAreRefused) {
  const std::string dir = prepare("damage", prose_documents(10), "bpe:300", 100000);
  const auto open = [&](int context = 16) { return error_of([&] { TextTask t(task_config(dir, context)); }); };
  ASSERT_EQ(open(), "");
  EXPECT_NE(open(100000).find("task.context"), std::string::npos) << "a window longer than a split";

  const std::string manifest = read_bytes(dir + "/manifest.json"), model = read_bytes(dir + "/tokenizer.model");
  const std::string no_manifest = fresh_dir("damage_empty");
  EXPECT_NE(error_of([&] { TextTask t(task_config(no_manifest, 16)); }).find("manifest.json"), std::string::npos);

  auto edited = [&](const std::string& from, const std::string& to) {
    std::string m = manifest;
    const size_t at = m.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) m.replace(at, from.size(), to);
    write_file(dir + "/manifest.json", m);
    return open();
  };
  EXPECT_NE(edited("\"val_000000.bin\"", "\"../x.bin\"").find("val_000000.bin"), std::string::npos);
  EXPECT_NE(edited("\"vocab_size\": 300", "\"vocab_size\": 2.5").find("tokenizer.vocab_size"), std::string::npos);
  EXPECT_NE(edited("\"vocab_size\": 300", "\"vocab_size\": 301").find("does not match"), std::string::npos);
  EXPECT_NE(edited("\"dtype\": \"uint16\"", "\"dtype\": \"uint32\"").find("dtype"), std::string::npos);
  EXPECT_NE(edited("\"format\"", "\"formats\"").find("format"), std::string::npos);
  write_file(dir + "/manifest.json", "{\"format\": ");
  EXPECT_NE(open().find("not valid JSON"), std::string::npos);
  write_file(dir + "/manifest.json", manifest);
  ASSERT_EQ(open(), "");

  // Another tokenizer under the same name: the hash in the manifest and in every shard header no longer match.
  const std::string other = prepare("damage_other", prose_documents(10), "bpe:310", 100000);
  fs::copy_file(other + "/tokenizer.model", dir + "/tokenizer.model", fs::copy_options::overwrite_existing);
  const std::string replaced = open();
  EXPECT_NE(replaced.find("task.text.path"), std::string::npos);
  EXPECT_NE(replaced.find("XXH64"), std::string::npos) << replaced;
  write_file(dir + "/tokenizer.model", model);
  fs::copy_file(other + "/train_000000.bin", dir + "/train_000000.bin", fs::copy_options::overwrite_existing);
  EXPECT_NE(open().find("train_000000.bin"), std::string::npos);
}

}  // namespace
}  // namespace canonlab
