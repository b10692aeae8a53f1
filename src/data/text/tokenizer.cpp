#include "data/text/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <unordered_map>

#include "engine/error.h"
#include "io/safetensors.h"

namespace canonlab {
namespace {

// sentencepiece's own threads during training. A fixed number, not the machine's: unigram training sums its
// expected counts per thread, so its scores (and the model's bytes) would otherwise depend on the core count.
constexpr int kTrainingThreads = 8;

std::string byte_piece(int b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  return name;
}

uint64_t hash_of(std::string_view bytes) { return xxh64(std::as_bytes(std::span(bytes.data(), bytes.size()))); }

// The training sentences, in the order given.
class SentenceList final : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceList(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return next_ >= sentences_.size(); }
  void Next() override { next_++; }
  const std::string& value() const override { return sentences_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  size_t next_ = 0;
};

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::bytes(bool with_eod) {
  Tokenizer t;
  t.with_eod_ = with_eod;
  for (int b = 0; b < 256; b++) {
    t.pieces_.emplace_back(1, char(b));
    t.byte_token_[b] = uint32_t(b);
  }
  t.names_.resize(256);
  if (with_eod) {
    t.eod_ = 256;
    t.pieces_.emplace_back();
    t.names_.push_back("<eod>");
  }
  for (const std::string& p : t.pieces_) t.characters_.push_back(uint32_t(utf8::count_characters(p)));
  t.hash_ = hash_of("bytes");
  return t;
}

Tokenizer Tokenizer::sentencepiece(std::string model, bool with_eod, const std::string& origin) {
  Tokenizer t;
  t.with_eod_ = with_eod;
  t.model_ = std::move(model);
  CANONLAB_CHECK(!t.model_.empty(), origin + ": the sentencepiece model is empty");
  t.hash_ = hash_of(t.model_);
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t.sp_->LoadFromSerializedProto(t.model_);
  CANONLAB_CHECK(status.ok(), origin + ": not a sentencepiece model (" + status.ToString() + ")");
  t.build_tables(origin);
  return t;
}

void Tokenizer::build_tables(const std::string& origin) {
  const int n = sp_->GetPieceSize();
  CANONLAB_CHECK(n > 0, origin + ": the sentencepiece model has no pieces");
  pieces_.assign(size_t(n), {});
  names_.assign(size_t(n), {});
  for (int id = 0; id < n; id++) {
    const std::string& piece = sp_->IdToPiece(id);
    if (sp_->IsByte(id)) continue;  // filled below
    if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsUnused(id)) {
      names_[size_t(id)] = piece;
      continue;
    }
    std::string text;
    for (size_t i = 0; i < piece.size(); i++) {
      if (piece.compare(i, 3, "\xE2\x96\x81") == 0) text += ' ', i += 2;
      else text += piece[i];
    }
    pieces_[size_t(id)] = std::move(text);
  }
  for (int b = 0; b < 256; b++) {
    const int id = sp_->PieceToId(byte_piece(b));
    CANONLAB_CHECK(id >= 0 && id < n && sp_->IsByte(id),
                   origin + ": the sentencepiece model has no byte piece " + byte_piece(b) +
                       ", so some bytes cannot be encoded; allowed: a model trained with byte_fallback=true (canonlab "
                       "data prepare --tokenizer bpe:VOCAB or unigram:VOCAB trains one)");
    byte_token_[b] = uint32_t(id);
    pieces_[size_t(id)] = std::string(1, char(b));
  }
  if (with_eod_) {
    eod_ = sp_->eos_id();
    CANONLAB_CHECK(eod_ >= 0 && eod_ < n, origin + ": the sentencepiece model has no eos piece to end documents "
                                                   "with; allowed: a model with one, or --no-eod");
    names_[size_t(eod_)] = "<eod>";
  }
  characters_.clear();
  for (const std::string& p : pieces_) characters_.push_back(uint32_t(utf8::count_characters(p)));
}

Tokenizer Tokenizer::clone() const {
  if (is_bytes()) return bytes(with_eod_);
  return sentencepiece(model_, with_eod_, "tokenizer");
}

void Tokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  if (is_bytes()) {
    for (char c : text) out.push_back(static_cast<unsigned char>(c));
    return;
  }
  std::vector<int> ids;
  for_each_run(text, [&](size_t begin, size_t end, bool clean) {
    if (!clean) {
      for (size_t i = begin; i < end; i++) out.push_back(byte_token_[static_cast<unsigned char>(text[i])]);
      return;
    }
    const auto status = sp_->Encode(text.substr(begin, end - begin), &ids);
    if (!status.ok()) throw Error("sentencepiece cannot encode a text run: " + status.ToString());
    for (int id : ids) out.push_back(uint32_t(id));
  });
}

std::string Tokenizer::decode(std::span<const uint32_t> ids) const {
  std::string text;
  for (uint32_t id : ids) {
    CANONLAB_CHECK(id < pieces_.size(), "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                            std::to_string(pieces_.size()));
    text += pieces_[id];
  }
  return text;
}

size_t Tokenizer::safe_cut(std::string_view text) const {
  if (is_bytes()) return text.size();
  // Piece boundaries 4 bytes or more before the end are final (for_each_run); take the last one.
  size_t cut = 0;
  for_each_run(text, [&](size_t begin, size_t, bool) {
    if (begin + 4 <= text.size()) cut = begin;
  });
  return cut;
}

std::string Tokenizer::token_text(int id) const {
  if (id < 0 || id >= vocab_size()) return "?" + std::to_string(id);
  if (!names_[size_t(id)].empty()) return names_[size_t(id)];
  const std::string_view bytes = pieces_[size_t(id)];
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    const size_t length = utf8::sequence_length(bytes, i);
    if (b == ' ') out += "\xE2\x90\xA3";  // U+2423 OPEN BOX
    else if (b == '\n') out += "\\n";
    else if (b > ' ' && b < 0x7f) out += char(b);
    else if (length > 1) out += bytes.substr(i, length);
    else {
      constexpr char hex[] = "0123456789abcdef";
      out += std::string("\\x") + hex[b >> 4] + hex[b & 15];
    }
    i += length > 1 ? length : 1;
  }
  return out;
}

std::string train_sentencepiece(const std::string& model_type, int vocab_size, const std::vector<std::string>& sentences,
                                const std::string& what) {
  CANONLAB_CHECK(!sentences.empty(), what + ": the inputs hold no text to train a tokenizer on");
  const std::unordered_map<std::string, std::string> options = {
      {"model_type", model_type},
      {"vocab_size", std::to_string(vocab_size)},
      // Every byte has a token, and the text is not changed before it is split: decode(encode(x)) == x.
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      // The sample is ours (prepare.cpp draws it from --seed, bounded in bytes); sentencepiece uses all of it.
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", std::to_string(2 * kMaxTrainingSentenceBytes)},
      {"num_threads", std::to_string(kTrainingThreads)},
      {"minloglevel", "2"},  // errors come back as the status below; its progress log would flood stderr
  };
  SentenceList list(sentences);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &list, &model);
  CANONLAB_CHECK(status.ok(), what + ": sentencepiece could not train the tokenizer: " + status.ToString());
  return model;
}

}  // namespace canonlab
