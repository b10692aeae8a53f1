#include "data/copy_task.h"

#include <numeric>

#include "engine/error.h"

namespace canonlab {

CopyTask::CopyTask(const TaskConfig& cfg) : vocab_(cfg.vocab), n_(cfg.n_symbols), loss_on_copy_only_(cfg.loss_on == "copy") {
  CANONLAB_CHECK(n_ >= 1 && n_ <= vocab_, "task.n_symbols: " + std::to_string(n_) + " must be in [1, task.vocab=" +
                                              std::to_string(vocab_) + "]");
}

void CopyTask::sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const {
  const int T = seq_len();
  int* tok = batch.tokens.data() + size_t(row) * T;
  int* tgt = batch.targets.data() + size_t(row) * T;
  float* lmask = batch.loss_mask.data() + size_t(row) * T;
  float* smask = batch.score_mask.data() + size_t(row) * T;

  // n distinct symbols: a partial Fisher-Yates shuffle of 0..vocab-1 driven by this sequence's own stream.
  CounterRng rng = row_rng(seed, stream, index);
  std::vector<int> pool(vocab_);
  std::iota(pool.begin(), pool.end(), 0);
  partial_shuffle(std::span(pool), size_t(n_), rng);
  tok[0] = bos();
  for (int i = 0; i < n_; i++) {
    tok[1 + i] = pool[i];
    tok[1 + n_ + i] = pool[i];
  }
  for (int t = 0; t < T; t++) {
    const bool has_next = t + 1 < T;
    const bool copyable = t >= first_query() && t <= last_query();
    tgt[t] = has_next ? tok[t + 1] : 0;
    lmask[t] = has_next && (!loss_on_copy_only_ || copyable) ? 1.f : 0.f;
    smask[t] = copyable ? 1.f : 0.f;
  }
}

void CopyTask::score(const Batch& batch, const float* logits, int, MetricSums& sums) const {
  score_argmax_accuracy(batch, logits, vocab_size(), "copy_acc", sums);
}

std::string CopyTask::token_text(int token) const {
  return token == bos() ? "<bos>" : "s" + std::to_string(token);
}

}  // namespace canonlab
