#pragma once
// Natural text: next-token prediction over windows of a text, bits per byte and per character on held-out text
// (docs/tasks/text.md). task.text.path is either
//   - a data directory made by `canonlab data prepare` (docs/text-data.md): the manifest gives the tokenizer and the
//     vocabulary, the train and val splits are memory-mapped token shards; or
//   - a plain file, read whole as bytes (the bytes tokenizer, no <eod>): its last round(heldout_frac * size) bytes
//     are the held-out split, the rest the training split.
// Either way a split is one sequence of tokens and the windows are the same:
//   training row:  an offset o uniform in [0, N_train - T - 1] (per seed, stream, row); tokens = train[o, o + T),
//                  targets = train[o + 1, o + T]. Windows may overlap and straddle documents and shards.
//   evaluation:    the held-out split tiled by W = floor((N_val - 1) / T) non-overlapping windows; window k has tokens
//                  val[kT, kT + T) and targets val[kT + 1, kT + T]. Eval row `index` of batch i (stream
//                  kHeldOutStream + suite * kHeldOutSuiteStride + i) is window k = i * B + index; rows with k >= W repeat window
//                  k mod W and are neither scored nor in the loss, so every window counts once.
// Metrics: bpb = sum of -log2 p(target) over the scored targets / the bytes those targets stand for
// (Tokenizer::token_bytes; <eod> stands for none); bpc the same over their characters (utf8::count_characters).
#include <memory>
#include <string>
#include <vector>

#include "data/task.h"
#include "data/text/shards.h"
#include "data/text/tokenizer.h"

namespace canonlab {

class TextTask final : public Task {
 public:
  explicit TextTask(const TaskConfig& cfg);
  std::string name() const override { return "text"; }
  int vocab_size() const override { return tokenizer_.vocab_size(); }
  int seq_len() const override { return context_; }
  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override;
  void sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const override;
  std::string token_text(int token) const override { return tokenizer_.token_text(token); }
  std::vector<std::string> metric_names() const override { return {"bpc", "bpb"}; }
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;

  // With task.text.eval_whole_split as many batches as it takes to score every held-out window once.
  int eval_batch_count(int configured, int batch_rows) const override;

  const Tokenizer& tokenizer() const { return tokenizer_; }
  bool from_data_directory() const { return bytes_.empty(); }
  int heldout_windows() const { return int((val_->size() - 1) / uint64_t(context_)); }
  uint64_t training_tokens() const { return train_->size(); }
  uint64_t heldout_tokens() const { return val_->size(); }
  // Where the window of an eval row starts in the held-out split (for tests and `data windows`).
  uint64_t heldout_window_start(uint64_t stream, uint64_t index, int batch_rows) const;
  // Where training row `index` of stream `stream` starts in the training split.
  uint64_t training_window_start(uint64_t seed, uint64_t stream, uint64_t index) const;
  // Memory the task holds: the whole file for a plain file; for a data directory the tokenizer's tables only (the
  // shards are mapped: the kernel pages them in and out as windows touch them, they are not resident memory).
  double resident_bytes() const;

 private:
  void open_data_directory(const std::string& dir);
  void open_text_file(const std::string& path, double heldout_frac);
  void fill_row(Batch& batch, int row, const TokenStream& split, uint64_t offset) const;

  int context_;
  bool whole_split_;
  Tokenizer tokenizer_;
  std::vector<unsigned char> bytes_;  // a plain file, read whole; empty for a data directory
  std::unique_ptr<TokenStream> train_, val_;
};

}  // namespace canonlab
