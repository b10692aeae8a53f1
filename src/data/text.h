#pragma once
// Byte-level text: next-byte prediction over windows of one text file, bits per character on a held-out tail.
//   tokens  = bytes[o .. o+T)       e.g. A ␣ d a y ␣ f o r ␣ f i r m ␣ d e c i s i o n s ! ... (T = task.context, default 256)
//   targets = bytes[o+1 .. o+T]     every position is trained and scored
// The file (task.text.path) is read whole; its last round(heldout_frac * size) bytes are the held-out split, the
// rest the training split. Training windows start at a uniform offset of the training split (overlap allowed).
// Evaluation tiles the held-out split with consecutive non-overlapping windows (window k covers tokens
// [kT, kT + T) and targets [kT + 1, kT + T + 1) of the split), so every held-out byte after the first is predicted at
// most once per pass; eval row `index` of batch i (stream kHeldOutStream + suite * 1000003 + i) is window
// (i * B + index) mod heldout_windows(). Vocabulary: the 256 byte values. Metric bpc = mean -log2 p(next byte).
#include <string>
#include <vector>

#include "data/task.h"

namespace canonlab {

class TextTask final : public Task {
 public:
  explicit TextTask(const TaskConfig& cfg);
  std::string name() const override { return "text"; }
  int vocab_size() const override { return 256; }
  int seq_len() const override { return context_; }
  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override;
  void sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const override;
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override { return {"bpc"}; }
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;

  int heldout_windows() const { return int((heldout_bytes() - 1) / size_t(context_)); }
  size_t training_bytes() const { return train_size_; }
  size_t heldout_bytes() const { return bytes_.size() - train_size_; }
  // Where the window of an eval row starts, as an offset into the file (for tests).
  size_t heldout_window_offset(uint64_t stream, uint64_t index, int batch_rows) const;

 private:
  void fill_row(Batch& batch, int row, size_t offset) const;
  std::vector<unsigned char> bytes_;  // the whole file
  size_t train_size_ = 0;             // bytes [0, train_size_) train; the rest is held out
  int context_;
};

}  // namespace canonlab
