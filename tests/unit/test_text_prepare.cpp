// canonlab data prepare: the shards hold exactly the tokenizer's own encoding of each document, split by document
// as DocumentSplit says; the manifest counts what it should; the output does not depend on the thread count; inputs
// are found in a fixed order; and every mistake is refused with the option named.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "data/text/corpus.h"
#include "data/text/manifest.h"
#include "data/text/prepare.h"
#include "data/text/tokenizer.h"
#include "cli_runner.h"
#include "engine/error.h"
#include "test_text_support.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using text_test::error_of;
using text_test::fresh_dir;
using text_test::read_bytes;
using text_test::read_json;
using text_test::split_tokens;
using text_test::synthetic_prose;
using text_test::write_file;

PrepareOptions options(const std::vector<std::string>& inputs, const std::string& tokenizer, const std::string& out) {
  PrepareOptions o;
  o.inputs = inputs;
  o.tokenizer = tokenizer;
  o.out = out;
  o.threads = 2;
  o.seed = 3;
  o.val_fraction = 0.3;
  o.progress = false;
  return o;
}

uint64_t characters_of(const std::string& s) {  // code points of valid UTF-8; stray continuation bytes count none
  uint64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// A corpus of 12 files (one empty, two in a subdirectory, one with invalid UTF-8, and with `long_line` one 1.2 MB line
// that the pipeline must cut into parts) and the documents they hold, in the order data prepare reads them.
std::vector<std::string> write_corpus(const std::string& dir, bool long_line) {
  std::vector<std::string> documents;
  for (int i = 0; i < 12; i++) {
    std::string text = synthetic_prose(uint64_t(i), 2000 + 500 * size_t(i));
    if (i == 4) text.clear();
    if (i == 6) text += "\xff\xfe broken \xE2\x96 \xE2\x96\x81 caf\xC3\xA9\n";
    if (i == 9 && long_line) {
      text = synthetic_prose(42, 1'200'000);
      std::ranges::replace(text, '\n', ' ');
    }
    char name[32];
    std::snprintf(name, sizeof name, i >= 10 ? "sub/doc%02d.txt" : "doc%02d.txt", i);
    write_file(dir + "/" + name, text);
    if (!text.empty()) documents.push_back(text);
  }
  return documents;
}

// What the shards of each split must hold: the tokenizer's encoding of each document, then <eod>.
std::pair<std::vector<uint32_t>, std::vector<uint32_t>> expected_splits(const Tokenizer& t,
                                                                         const std::vector<std::string>& documents,
                                                                         const PrepareOptions& o) {
  const DocumentSplit split(o.seed, documents.size(), o.val_fraction);
  std::vector<uint32_t> train, val;
  for (size_t d = 0; d < documents.size(); d++) {
    std::vector<uint32_t>& out = split.is_val(d) ? val : train;
    t.encode(documents[d], out);
    if (t.eod() >= 0) out.push_back(uint32_t(t.eod()));
  }
  return {train, val};
}

TEST(TextPrepare, ShardsHoldTheTokenizersEncodingOfEachDocument) {
  const std::string corpus = fresh_dir("prepare_corpus");
  const std::vector<std::string> documents = write_corpus(corpus, true);
  for (const std::string spec : {"bytes", "bpe:400"}) {
    const std::string out = fresh_dir("prepare_out_" + spec.substr(0, 3));
    PrepareOptions o = options({corpus}, spec, out);
    o.shard_tokens = spec == "bytes" ? 20000 : 3000;  // several shards per split
    const PrepareReport report = prepare_text_data(o);
    const Tokenizer t = spec == "bytes" ? Tokenizer::bytes(true)
                                        : Tokenizer::sentencepiece(read_bytes(out + "/tokenizer.model"), true, "t");
    const auto [train, val] = expected_splits(t, documents, o);
    ASSERT_FALSE(val.empty());
    ASSERT_FALSE(train.empty());
    EXPECT_EQ(split_tokens(out, "train"), train) << spec;
    EXPECT_EQ(split_tokens(out, "val"), val) << spec;

    // The manifest's counts, computed here from the documents.
    const DocumentSplit split(o.seed, documents.size(), o.val_fraction);
    uint64_t docs[2] = {}, bytes[2] = {}, chars[2] = {};
    for (size_t d = 0; d < documents.size(); d++) {
      const int s = split.is_val(d);
      docs[s]++, bytes[s] += documents[d].size(), chars[s] += characters_of(documents[d]);
    }
    const nlohmann::json m = read_json(out + "/manifest.json");
    for (const auto& [name, s] : {std::pair{"train", 0}, std::pair{"val", 1}}) {
      const nlohmann::json& j = m["splits"][name];
      EXPECT_EQ(j["documents"].get<uint64_t>(), docs[s]) << name;
      EXPECT_EQ(j["bytes"].get<uint64_t>(), bytes[s]) << name;
      EXPECT_EQ(j["characters"].get<uint64_t>(), chars[s]) << name;
      EXPECT_EQ(j["tokens"].get<uint64_t>(), (s ? val : train).size()) << name;
    }
    EXPECT_EQ(m["tokenizer"]["vocab_size"].get<int>(), t.vocab_size());
    EXPECT_EQ(m["tokenizer"]["eod_id"].get<int>(), t.eod());
    EXPECT_EQ(m["dtype"], "uint16");
    EXPECT_GT(m["splits"]["train"]["shards"].size(), 1u);
    EXPECT_EQ(report.manifest.train.tokens, train.size());
    // read_manifest accepts what prepare wrote.
    EXPECT_EQ(read_manifest(out).val.tokens, val.size());
    if (spec == "bytes") {
      EXPECT_FALSE(fs::exists(out + "/tokenizer.model"));
      EXPECT_TRUE(m["tokenizer"]["file"].is_null());
    } else {
      EXPECT_LT(train.size() + val.size(), bytes[0] + bytes[1]) << "BPE compresses";
    }
  }
}

TEST(TextPrepare, OutputDoesNotDependOnTheThreadCount) {
  const std::string corpus = fresh_dir("threads_corpus");
  write_corpus(corpus, true);
  std::map<std::string, std::string> first;
  for (const int threads : {1, 3}) {
    const std::string out = fresh_dir("threads_out_" + std::to_string(threads));
    PrepareOptions o = options({corpus}, "bpe:300", out);
    o.threads = threads;
    o.shard_tokens = 20000;
    prepare_text_data(o);
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(out)) files[entry.path().filename().string()] = read_bytes(entry.path());
    if (first.empty()) first = files;
    else EXPECT_TRUE(files == first) << "the data directory differs between 1 and 3 threads";
  }
  EXPECT_TRUE(first.contains("tokenizer.model"));
  EXPECT_TRUE(first.contains("manifest.json"));
}

TEST(TextPrepare, DocumentDelimiterAcrossReadBlocks) {
  const std::string corpus = fresh_dir("delimiter_corpus");
  const std::string delim = "<|doc|>";
  // The first delimiter straddles the reader's 4 MiB block boundary; two delimiters in a row make an empty document,
  // which is skipped; the file's end ends the last document.
  const std::string a(DocumentReader::kBlockBytes - 3, 'a');
  const std::vector<std::string> documents = {a, "bbb\nb", "c", "dd"};
  write_file(corpus + "/one.txt", a + delim + "bbb\nb" + delim + delim + "c" + delim);
  write_file(corpus + "/two.txt", "dd");
  const std::string out = fresh_dir("delimiter_out");
  PrepareOptions o = options({corpus + "/one.txt", corpus + "/two.txt"}, "bytes", out);
  o.doc_delimiter = delim;
  o.val_fraction = 0.5;
  prepare_text_data(o);
  const auto [train, val] = expected_splits(Tokenizer::bytes(true), documents, o);
  EXPECT_EQ(split_tokens(out, "train"), train);
  EXPECT_EQ(split_tokens(out, "val"), val);
  const Manifest m = read_manifest(out);
  EXPECT_EQ(m.train.documents + m.val.documents, 4u);
  EXPECT_EQ(m.train.bytes + m.val.bytes, a.size() + 5 + 1 + 2);

  // Without <eod> documents follow each other directly.
  const std::string plain = fresh_dir("delimiter_plain");
  PrepareOptions p = o;
  p.out = plain;
  p.eod = false;
  prepare_text_data(p);
  const auto [train2, val2] = expected_splits(Tokenizer::bytes(false), documents, p);
  EXPECT_EQ(split_tokens(plain, "train"), train2);
  EXPECT_EQ(read_manifest(plain).vocab_size, 256);
  EXPECT_EQ(read_manifest(plain).eod_id, -1);
}

TEST(TextPrepare, SplitHoldsOutWholeDocumentsAndNeverLeavesASplitEmpty) {
  for (const uint64_t n : {2, 3, 10, 50})
    for (const double f : {0.001, 0.5, 0.999}) {
      const DocumentSplit split(7, n, f);
      uint64_t val = 0;
      for (uint64_t d = 0; d < n; d++) val += split.is_val(d);
      EXPECT_GE(val, 1u) << n << " " << f;
      EXPECT_LE(val, n - 1) << n << " " << f;
    }
  const DocumentSplit split(7, 20000, 0.2);
  uint64_t val = 0;
  for (uint64_t d = 0; d < 20000; d++) val += split.is_val(d);
  EXPECT_NEAR(double(val) / 20000, 0.2, 0.015);
  const DocumentSplit other(8, 20000, 0.2);
  int same = 0;
  for (uint64_t d = 0; d < 1000; d++) same += split.is_val(d) == other.is_val(d);
  EXPECT_LT(same, 900) << "the seed changes the split";
}

TEST(TextPrepare, InputsComeInAFixedOrder) {
  const std::string dir = fresh_dir("inputs");
  for (const char* name : {"b.txt", "B.txt", "a/z.txt", "a/y.md", "c.txt"}) write_file(dir + "/" + name, "x");
  EXPECT_EQ(expand_inputs({dir}),
            (std::vector<std::string>{dir + "/B.txt", dir + "/a/y.md", dir + "/a/z.txt", dir + "/b.txt", dir + "/c.txt"}));
  EXPECT_EQ(expand_inputs({dir + "/*.txt"}),
            (std::vector<std::string>{dir + "/B.txt", dir + "/b.txt", dir + "/c.txt"}));
  EXPECT_EQ(expand_inputs({dir + "/c.txt", dir + "/a"}),
            (std::vector<std::string>{dir + "/c.txt", dir + "/a/y.md", dir + "/a/z.txt"}));
  EXPECT_NE(error_of([&] { expand_inputs({dir + "/b.txt", dir + "/*.txt"}); }).find("named twice"), std::string::npos);
  EXPECT_NE(error_of([&] { expand_inputs({dir + "/*.pdf"}); }).find("matches nothing"), std::string::npos);
  EXPECT_NE(error_of([&] { expand_inputs({dir + "/none.txt"}); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([&] { expand_inputs({"/dev/null"}); }).find("not a regular file"), std::string::npos);
  EXPECT_EQ(parse_escapes("a\\n\\n\\t\\\\\\x41\\0", "x"), std::string("a\n\n\t\\A\0", 7));
  EXPECT_NE(error_of([&] { parse_escapes("\\q", "--doc-delimiter"); }).find("--doc-delimiter"), std::string::npos);
  EXPECT_THROW(parse_escapes("\\x4", "x"), Error);
  EXPECT_THROW(parse_escapes("end\\", "x"), Error);
}

TEST(TextPrepare, MistakesAreRefusedWithTheOptionNamed) {
  const std::string corpus = fresh_dir("mistakes_corpus");
  write_file(corpus + "/one.txt", synthetic_prose(1, 3000));
  write_file(corpus + "/two.txt", synthetic_prose(2, 3000));
  const auto prepare = [&](PrepareOptions o) { return error_of([&] { prepare_text_data(o); }); };
  const std::string out = fresh_dir("mistakes_out") + "/data";
  EXPECT_NE(prepare(options({corpus + "/one.txt"}, "bytes", out)).find("--doc-delimiter"), std::string::npos)
      << "one document cannot be split";
  EXPECT_FALSE(fs::exists(out)) << "a refused run leaves nothing behind";
  for (const std::string spec : {"bpe:10", "bpe:x", "bpe:", "unigram:99999999999", "gpt2"})
    EXPECT_NE(prepare(options({corpus}, spec, out)).find("--tokenizer"), std::string::npos) << spec;
  EXPECT_NE(prepare(options({corpus}, corpus + "/missing.model", out)).find("missing.model"), std::string::npos);
  PrepareOptions bad_fraction = options({corpus}, "bytes", out);
  bad_fraction.val_fraction = 1;
  EXPECT_NE(prepare(bad_fraction).find("--val-fraction"), std::string::npos);

  ASSERT_EQ(prepare(options({corpus}, "bytes", out)), "");
  EXPECT_NE(prepare(options({corpus}, "bytes", out)).find("--force"), std::string::npos) << "an existing directory";
  PrepareOptions replace = options({corpus}, "bytes", out);
  replace.force = true;
  replace.shard_tokens = 500;
  ASSERT_EQ(prepare(replace), "");
  EXPECT_TRUE(fs::exists(out + "/train_000003.bin"));
  replace.shard_tokens = 100000;
  ASSERT_EQ(prepare(replace), "");
  EXPECT_FALSE(fs::exists(out + "/train_000003.bin")) << "--force removes the old shards";
  PrepareOptions too_big = replace;
  too_big.tokenizer = "bpe:100000";
  EXPECT_NE(prepare(too_big).find("bpe:100000"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/manifest.json")) << "a tokenizer that cannot be trained leaves the old data alone";
  PrepareOptions not_ours = options({corpus}, "bytes", corpus);
  not_ours.force = true;
  EXPECT_NE(prepare(not_ours).find("not a data directory"), std::string::npos);
  EXPECT_TRUE(fs::exists(corpus + "/one.txt"));
}

TEST(TextPrepare, AnExistingModelGivesTheSameShards) {
  const std::string corpus = fresh_dir("model_corpus");
  write_corpus(corpus, false);
  const std::string first = fresh_dir("model_first"), second = fresh_dir("model_second");
  prepare_text_data(options({corpus}, "unigram:300", first));
  prepare_text_data(options({corpus}, first + "/tokenizer.model", second));
  EXPECT_EQ(split_tokens(first, "train"), split_tokens(second, "train"));
  EXPECT_EQ(split_tokens(first, "val"), split_tokens(second, "val"));
  EXPECT_EQ(read_bytes(first + "/tokenizer.model"), read_bytes(second + "/tokenizer.model"));
  EXPECT_EQ(read_manifest(second).tokenizer, first + "/tokenizer.model");
}

TEST(TextPrepare, KingJamesGenesis) {
  const std::string text = text_test::kjv_text("Gen1:1", "Gen50:26");
  ASSERT_GT(text.size(), 150000u);
  ASSERT_TRUE(text.starts_with("Genesis 1\n1 In the beginning God created the heaven and the earth.\n"));
  const std::string corpus = fresh_dir("kjv_corpus"), out = fresh_dir("kjv_out");
  write_file(corpus + "/genesis.txt", text);
  PrepareOptions o = options({corpus}, "bpe:1024", out);
  o.doc_delimiter = "\n\n";
  o.val_fraction = 0.1;
  const PrepareReport r = prepare_text_data(o);
  const Manifest& m = r.manifest;
  EXPECT_EQ(m.train.documents + m.val.documents, 50u) << "one document per chapter";
  EXPECT_GE(m.val.documents, 1u);
  EXPECT_EQ(m.train.bytes + m.val.bytes, text.size() - 49 * 2) << "every byte but the 49 delimiters";
  EXPECT_EQ(m.train.characters + m.val.characters, m.train.bytes + m.val.bytes) << "the KJV text is ASCII";
  const double bytes_per_token = double(m.train.bytes) / double(m.train.tokens - m.train.documents);
  EXPECT_GT(bytes_per_token, 3.0) << "a 1024-piece BPE on English prose";
  const Tokenizer t = Tokenizer::sentencepiece(read_bytes(out + "/tokenizer.model"), true, "t");
  std::vector<uint32_t> val = split_tokens(out, "val");
  std::string decoded = t.decode(val);
  EXPECT_EQ(decoded.size(), m.val.bytes);
  EXPECT_NE(decoded.find("\n1 "), std::string::npos);
}

TEST(TextPrepare, CommandLine) {
  using test_support::run_cli;
  const std::string corpus = fresh_dir("cli_corpus"), out = fresh_dir("cli_out") + "/data";
  write_file(corpus + "/all.txt", synthetic_prose(5, 20000));
  const std::string prepare = "data prepare --input " + corpus + " --tokenizer bpe:300 --doc-delimiter '.\\n' --out " + out;
  const auto done = run_cli(prepare + " --threads 2 --shard-tokens 2000");
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("wrote " + out + ": tokenizer bpe:300 (vocabulary 300, <eod> = 1), uint16 shards"),
            std::string::npos) << done.output;
  EXPECT_NE(done.output.find("bytes per token"), std::string::npos);
  const auto again = run_cli(prepare);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.output.find("error: --out"), std::string::npos) << again.output;
  const auto bad = run_cli("data prepare --input " + corpus + " --tokenizer bpe:7 --out " + out + "2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("error: --tokenizer"), std::string::npos) << bad.output;

  const auto windows = run_cli("data windows text --set task.text.path=" + out + " --set task.context=16 "
                               "--set train.batch_size=3 --set train.eval_batches=2 --steps 2");
  ASSERT_EQ(windows.exit_code, 0) << windows.output;
  const nlohmann::json j = nlohmann::json::parse(windows.output);
  EXPECT_EQ(j["vocab_size"], 300);
  ASSERT_EQ(j["train"].size(), 2u);
  EXPECT_EQ(j["train"][1]["tokens"].size(), 3u);
  EXPECT_EQ(j["train"][1]["tokens"][0].size(), 16u);
  EXPECT_EQ(j["eval"].size(), 2u);
  const auto show = run_cli("data show text --set task.text.path=" + out + " --set task.context=400 --tokens 0 --n 1");
  ASSERT_EQ(show.exit_code, 0) << show.output;
  EXPECT_NE(show.output.find("<eod>"), std::string::npos) << "documents end with <eod>";
}

}  // namespace
}  // namespace canonlab
