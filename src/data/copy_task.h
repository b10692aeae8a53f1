#pragma once
// Copy / induction task: [BOS] r1 .. rn r1 .. rn with n distinct symbols drawn uniformly without
// replacement from `vocab` symbols. BOS is token id `vocab`. The second block is predictable from the first:
// at the second occurrence of r_i (position n + i) the next token r_{i+1} can be copied, i = 1..n-1.
#include "data/task.h"

namespace canonlab {

class CopyTask final : public Task {
 public:
  explicit CopyTask(const TaskConfig& cfg);
  std::string name() const override { return "copy"; }
  int vocab_size() const override { return vocab_ + 1; }
  int seq_len() const override { return 2 * n_ + 1; }
  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override;
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override { return {"copy_acc"}; }

  int n_symbols() const { return n_; }
  int bos() const { return vocab_; }
  // Positions q in the second block whose next token is predictable by copying: q = n + i, i = 1..n-1.
  // The earlier occurrence of the same token is at q - n.
  int first_query() const { return n_ + 1; }
  int last_query() const { return 2 * n_ - 1; }

 private:
  int vocab_, n_;
  bool loss_on_copy_only_;
};

}  // namespace canonlab
