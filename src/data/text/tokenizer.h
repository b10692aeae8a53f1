#pragma once
// Tokenizers of the natural-text pipeline (docs/text-data.md): the 256 byte values, or a sentencepiece model (BPE or
// unigram) with byte fallback. Both are lossless for arbitrary bytes, invalid UTF-8 included:
// decode(encode(x)) == x, and every token has a fixed byte string (token_bytes), which is what bits per byte divide by.
//
// sentencepiece alone is not lossless: even with the identity normaliser it replaces invalid UTF-8 by U+FFFD and
// decodes its whitespace mark U+2581 as a space. So encode() hands sentencepiece only "clean runs" -- valid UTF-8
// other than '\n' and U+2581, at most kMaxRunBytes -- and writes every other byte as its byte-fallback token:
//   "a\xff b\n" -> sp("a") <0xFF> sp(" b") <0x0A>
// Runs never cross such a byte, so the encoding of a text is the concatenation of the encodings of its runs, and
// the pipeline can cut a long document at any run boundary (safe_cut) and encode the pieces on different threads.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/text/utf8.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace canonlab {

// Longest text sentencepiece sees at once; longer valid text is cut into runs of at most this many bytes.
inline constexpr size_t kMaxRunBytes = 65536;

// Calls piece(begin, end, clean) for the consecutive pieces of `text` that encode() treats separately: clean runs
// (clean = true) and single unclean sequences (an invalid byte, '\n', or the three bytes of U+2581). Whether the
// sequence at i is clean depends on text[i, i + 4) only, so a piece boundary b with b + 4 <= text.size() stays where
// it is whatever bytes are appended to `text`.
template <class Piece>
void for_each_run(std::string_view text, Piece&& piece) {
  size_t begin = 0, i = 0;
  while (i < text.size()) {
    const size_t length = utf8::sequence_length(text, i);
    const bool clean = length > 0 && text[i] != '\n' && text.substr(i, length) != "\xE2\x96\x81";
    if (clean && i + length - begin <= kMaxRunBytes) {
      i += length;
      continue;
    }
    if (i > begin) piece(begin, i, true);
    if (clean) {  // the run is full; the sequence at i starts the next one
      begin = i;
      continue;
    }
    const size_t unclean = length > 0 ? length : 1;
    piece(i, i + unclean, false);
    i += unclean;
    begin = i;
  }
  if (i > begin) piece(begin, i, true);
}

class Tokenizer {
 public:
  // The 256 byte values; with_eod adds id 256, the end-of-document token.
  static Tokenizer bytes(bool with_eod);
  // A sentencepiece model (the bytes of a .model file), which must have all 256 byte pieces <0x00>..<0xFF>; with
  // with_eod its eos piece is the end-of-document token. `origin` names the model in errors.
  static Tokenizer sentencepiece(std::string model, bool with_eod, const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();
  // An independent copy (its own sentencepiece processor), for one encoding thread.
  Tokenizer clone() const;

  bool is_bytes() const { return model_.empty(); }
  int vocab_size() const { return int(pieces_.size()); }
  int eod() const { return eod_; }                 // -1: documents are not separated
  const std::string& model() const { return model_; }  // the serialized sentencepiece model; empty for bytes
  // XXH64 of model() (of the 5 bytes "bytes" for the byte tokenizer), written into every shard header.
  uint64_t hash() const { return hash_; }

  // Appends the tokens of `text` to `out`.
  void encode(std::string_view text, std::vector<uint32_t>& out) const;
  std::string decode(std::span<const uint32_t> ids) const;
  // The bytes a token stands for: one byte for a byte token, the piece's text (U+2581 read as a space) for a
  // sentencepiece piece, nothing for <eod>, <unk> and other control pieces.
  std::string_view token_bytes(uint32_t id) const { return pieces_[id]; }
  uint32_t token_characters(uint32_t id) const { return characters_[id]; }  // utf8::count_characters of its bytes
  // For `data show`: printable ASCII as itself, space as U+2423, newline as \n, other valid UTF-8 as itself, other
  // bytes as \xNN; control pieces by name (<eod>, <unk>).
  std::string token_text(int id) const;

  // The largest p <= text.size() such that encode(text) begins with encode(text[0, p)) and continues with
  // encode(text[p, ...)) whatever bytes follow `text`. `text` must start where encoding starts afresh (a document's
  // start or an earlier cut). 0 when no such p exists yet (fewer than a run's worth of bytes).
  size_t safe_cut(std::string_view text) const;

 private:
  Tokenizer();
  void build_tables(const std::string& origin);

  std::string model_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<std::string> pieces_;      // token_bytes of every id
  std::vector<uint32_t> characters_;     // token_characters of every id
  std::vector<std::string> names_;       // token_text of control pieces, empty for the others
  uint32_t byte_token_[256] = {};        // the id of each byte's token
  int eod_ = -1;
  bool with_eod_ = false;
  uint64_t hash_ = 0;
};

// Trains a sentencepiece model (model_type "bpe" or "unigram") with vocab_size pieces on `sentences`, which must be
// clean runs (for_each_run) of at most kMaxTrainingSentenceBytes. Byte fallback, identity normalisation, no dummy
// prefix, whitespace kept as it is; ids 0 = <unk>, 1 = </s> (the end-of-document token), 2..257 = the bytes.
// Deterministic: the sentences are used in the order given and sentencepiece runs a fixed number of threads, so the
// model (its bytes) does not depend on the machine. Errors name `what` (the --tokenizer value).
inline constexpr size_t kMaxTrainingSentenceBytes = 4096;
std::string train_sentencepiece(const std::string& model_type, int vocab_size, const std::vector<std::string>& sentences,
                                const std::string& what);

}  // namespace canonlab
