#pragma once
// `canonlab data prepare`: text files in, a data directory out (docs/text-data.md):
//   DATA_DIR/manifest.json      the tokenizer and, per split, documents, bytes, characters, tokens and shard files
//   DATA_DIR/tokenizer.model    the sentencepiece model (not for the bytes tokenizer)
//   DATA_DIR/train_000000.bin, ..., val_000000.bin, ...   token shards (data/text/shards.h)
// Stages: scan the inputs (count the documents; draw the tokenizer's training sample), train or load the
// tokenizer, encode on every core and stream the tokens into shards, write the manifest last. Memory is bounded by
// the training sample, one block of input per thread and the shard write buffers, never by the corpus; the output
// is the same for every thread count.
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/manifest.h"

namespace canonlab {

struct PrepareOptions {
  std::vector<std::string> inputs;       // files, directories, glob patterns (data/text/corpus.h)
  std::string tokenizer = "bytes";       // bytes | bpe:VOCAB | unigram:VOCAB | PATH.model
  std::string out;                       // the data directory
  double val_fraction = 0.1;             // expected fraction of documents held out
  int threads = 0;                       // encoding threads; 0 = every core
  uint64_t seed = 0;                     // the split and the tokenizer's training sample
  std::string doc_delimiter;             // bytes between documents inside a file; empty: one document per file
  bool eod = true;                       // an end-of-document token after every document
  uint64_t shard_tokens = 100'000'000;   // tokens per shard file (the last one of a split holds the rest)
  uint64_t sample_bytes = uint64_t(16) << 20;  // text the tokenizer is trained on, drawn uniformly by line
  bool force = false;                    // replace an existing data directory
  bool progress = true;                  // a bar (terminal) or a line per stage on stderr
};

struct PrepareReport {
  Manifest manifest;
  uint64_t input_bytes = 0;    // of the input files, delimiters included
  uint64_t sample_bytes = 0;   // the tokenizer's training sample
  double scan_seconds = 0, train_seconds = 0, encode_seconds = 0, total_seconds = 0;
};

PrepareReport prepare_text_data(const PrepareOptions& options);

// Which split document `index` (0-based, in input order, empty documents not counted) goes to: validation when a
// uniform draw from (seed, index) is below val_fraction. If that leaves a split empty, the document with the
// smallest draw goes to validation (or the one with the largest to training), so both always hold one.
class DocumentSplit {
 public:
  DocumentSplit(uint64_t seed, uint64_t documents, double val_fraction);
  bool is_val(uint64_t index) const;

 private:
  double draw(uint64_t index) const;
  uint64_t seed_;
  double fraction_;
  int64_t forced_val_ = -1, forced_train_ = -1;
};

}  // namespace canonlab
