// Tokenizers of the text pipeline: UTF-8 facts, lossless encoding of arbitrary bytes (invalid UTF-8 included),
// safe cuts, sentencepiece training and the models it refuses.
#include <gtest/gtest.h>

#include <sentencepiece_trainer.h>

#include <string>
#include <vector>

#include "data/text/tokenizer.h"
#include "data/text/utf8.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "test_text_support.h"

namespace canonlab {
namespace {

using text_test::synthetic_prose;

// One BPE model for the tests of this file (training takes a fraction of a second).
const std::string& bpe_model() {
  static const std::string model = [] {
    std::vector<std::string> sentences;
    const std::string prose = synthetic_prose(1, 200000);
    for_each_run(prose, [&](size_t b, size_t e, bool clean) {
      if (clean) sentences.push_back(prose.substr(b, e - b));
    });
    return train_sentencepiece("bpe", 400, sentences, "bpe:400");
  }();
  return model;
}

// Strings meant to break a tokenizer: every kind of invalid UTF-8, U+2581 (sentencepiece's space mark), control
// bytes, whitespace runs, and random bytes.
std::vector<std::string> hard_strings() {
  std::vector<std::string> s = {
      "",
      " ",
      "   leading and trailing   ",
      "tab\there\r\nnewline\n\n",
      std::string("nul\0byte", 8),
      "\xE2\x96\x81 the space mark \xE2\x96\x81\xE2\x96\x81",
      "\xff\xfe invalid lead bytes \xc0\xc1\xf5\xf8",
      "overlong \xC0\x80 \xE0\x80\x80 \xF0\x80\x80\x80",
      "surrogate \xED\xA0\x80 and max \xF4\x8F\xBF\xBF beyond \xF4\x90\x80\x80",
      "truncated \xE2\x96 \xF0\x9F\x98 end\xE2",
      "stray continuation \x80\xBF",
      "valid: caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 the lord",
  };
  CounterRng rng(5, 1);
  for (int i = 0; i < 300; i++) {
    std::string r(rng.below(200), '\0');
    for (char& c : r) c = char(rng.below(256));
    s.push_back(r);
  }
  for (int i = 0; i < 100; i++) {  // mostly prose with a few random bytes, so runs and byte tokens alternate
    std::string r = synthetic_prose(uint64_t(i), 100 + rng.below(300));
    for (int k = 0; k < 3; k++) r[rng.below(r.size())] = char(rng.below(256));
    s.push_back(r);
  }
  return s;
}

std::vector<uint32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  t.encode(text, ids);
  return ids;
}

TEST(TextUtf8, SequencesAndCharacters) {
  using utf8::sequence_length;
  EXPECT_EQ(sequence_length("a", 0), 1u);
  EXPECT_EQ(sequence_length("\xC3\xA9", 0), 2u);
  EXPECT_EQ(sequence_length("\xE2\x96\x81", 0), 3u);
  EXPECT_EQ(sequence_length("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(sequence_length("\xF4\x8F\xBF\xBF", 0), 4u);  // U+10FFFF
  for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x9F\xBF", "\xED\xA0\x80", "\xF0\x8F\xBF\xBF",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xE2\x96", "\xC3"})
    EXPECT_EQ(sequence_length(bad, 0), 0u) << bad;
  EXPECT_EQ(utf8::count_characters("caf\xC3\xA9"), 4u);
  EXPECT_EQ(utf8::count_characters("\xF0\x9F\x98\x80!"), 2u);
  EXPECT_EQ(utf8::count_characters("\x80\x80"), 0u);  // stray continuation bytes count none
  EXPECT_EQ(utf8::count_characters("\xFF\xC3"), 2u);  // other invalid bytes one each
}

TEST(TextTokenizer, BytesAreIdentity) {
  const Tokenizer plain = Tokenizer::bytes(false), with_eod = Tokenizer::bytes(true);
  EXPECT_EQ(plain.vocab_size(), 256);
  EXPECT_EQ(plain.eod(), -1);
  EXPECT_EQ(with_eod.vocab_size(), 257);
  EXPECT_EQ(with_eod.eod(), 256);
  EXPECT_EQ(with_eod.token_bytes(256), "");
  EXPECT_EQ(with_eod.token_text(256), "<eod>");
  for (const std::string& s : hard_strings()) {
    const std::vector<uint32_t> ids = encode(with_eod, s);
    ASSERT_EQ(ids.size(), s.size());
    for (size_t i = 0; i < s.size(); i++) ASSERT_EQ(ids[i], static_cast<unsigned char>(s[i]));
    ASSERT_EQ(with_eod.decode(ids), s);
  }
  EXPECT_EQ(plain.token_characters('a'), 1u);
  EXPECT_EQ(plain.token_characters(0xC3), 1u);
  EXPECT_EQ(plain.token_characters(0xA9), 0u);
}

TEST(TextTokenizer, SentencePieceRoundTripsArbitraryBytes) {
  const Tokenizer t = Tokenizer::sentencepiece(bpe_model(), true, "test");
  EXPECT_EQ(t.vocab_size(), 400);
  EXPECT_EQ(t.eod(), 1);
  EXPECT_EQ(t.token_text(1), "<eod>");
  EXPECT_EQ(t.token_bytes(1), "");
  for (const std::string& s : hard_strings()) {
    const std::vector<uint32_t> ids = encode(t, s);
    for (uint32_t id : ids) ASSERT_LT(id, 400u);
    ASSERT_EQ(t.decode(ids), s) << "round trip of a " << s.size() << "-byte string";
    size_t bytes = 0;
    for (uint32_t id : ids) bytes += t.token_bytes(id).size();
    ASSERT_EQ(bytes, s.size()) << "token_bytes cover the text exactly";
    for (uint32_t id : ids) ASSERT_NE(id, 0u) << "<unk> never appears (byte fallback)";
  }
  // It is a real BPE: prose takes far fewer tokens than bytes; U+2581 and invalid bytes become byte tokens.
  const std::string prose = synthetic_prose(99, 5000);
  EXPECT_LT(double(encode(t, prose).size()), 0.5 * double(prose.size()));
  const std::vector<uint32_t> mark = encode(t, "\xE2\x96\x81");
  ASSERT_EQ(mark.size(), 3u);
  EXPECT_EQ(t.token_bytes(mark[0]), "\xE2");
  EXPECT_EQ(t.token_text(mark[0]), "\\xe2");
  EXPECT_EQ(t.token_text(encode(t, " the")[0]), "\xE2\x90\xA3the");
}

TEST(TextTokenizer, SafeCutsDoNotChangeTheEncoding) {
  const Tokenizer t = Tokenizer::sentencepiece(bpe_model(), false, "test");
  CounterRng rng(11, 2);
  for (const std::string& s : hard_strings()) {
    if (s.size() < 8) continue;
    const size_t length = 4 + rng.below(s.size() - 3);  // a prefix, as the pipeline holds it
    const std::string_view prefix = std::string_view(s).substr(0, length);
    const size_t cut = t.safe_cut(prefix);
    ASSERT_LE(cut + 4, std::max<size_t>(length, 4));
    std::vector<uint32_t> joined = encode(t, s.substr(0, cut));
    t.encode(std::string_view(s).substr(cut), joined);
    ASSERT_EQ(joined, encode(t, s)) << "cut at " << cut << " of " << s.size();
  }
  // A long line without newlines is cut into runs of at most kMaxRunBytes, so there is a cut well inside it.
  const std::string line(3 * kMaxRunBytes, 'a');
  EXPECT_GE(t.safe_cut(line), 2 * kMaxRunBytes);
  EXPECT_EQ(Tokenizer::bytes(false).safe_cut(line), line.size());
}

TEST(TextTokenizer, TrainingIsDeterministicAndUnigramWorks) {
  std::vector<std::string> sentences;
  const std::string prose = synthetic_prose(3, 100000);
  for_each_run(prose, [&](size_t b, size_t e, bool clean) {
    if (clean) sentences.push_back(prose.substr(b, e - b));
  });
  EXPECT_EQ(train_sentencepiece("bpe", 300, sentences, "x"), train_sentencepiece("bpe", 300, sentences, "x"));
  const std::string unigram = train_sentencepiece("unigram", 300, sentences, "unigram:300");
  EXPECT_EQ(unigram, train_sentencepiece("unigram", 300, sentences, "unigram:300"));
  const Tokenizer t = Tokenizer::sentencepiece(unigram, true, "unigram");
  for (const std::string& s : hard_strings()) ASSERT_EQ(t.decode(encode(t, s)), s);
  try {
    train_sentencepiece("bpe", 100000, sentences, "bpe:100000");
    FAIL() << "a vocabulary larger than the text allows is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bpe:100000"), std::string::npos) << e.what();
  }
}

TEST(TextTokenizer, RefusesModelsThatCannotEncodeEveryByte) {
  std::vector<std::string> sentences;
  const std::string prose = synthetic_prose(4, 50000);
  for_each_run(prose, [&](size_t b, size_t e, bool clean) {
    if (clean) sentences.push_back(prose.substr(b, e - b));
  });
  // A model trained the usual way, without byte fallback.
  struct List : sentencepiece::SentenceIterator {
    const std::vector<std::string>& s;
    size_t i = 0;
    explicit List(const std::vector<std::string>& v) : s(v) {}
    bool done() const override { return i >= s.size(); }
    void Next() override { i++; }
    const std::string& value() const override { return s[i]; }
    sentencepiece::util::Status status() const override { return {}; }
  } list(sentences);
  std::string model;
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train({{"vocab_size", "200"}, {"model_type", "bpe"}, {"minloglevel", "2"}},
                                                         &list, &model)
                  .ok());
  try {
    Tokenizer::sentencepiece(model, false, "plain.model");
    FAIL() << "a model without byte pieces is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plain.model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte_fallback"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::sentencepiece("not a model", false, "junk.model"), Error);
  EXPECT_THROW(Tokenizer::sentencepiece("", false, "empty.model"), Error);
}

}  // namespace
}  // namespace canonlab
