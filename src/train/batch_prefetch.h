#pragma once
// The training batches of step s + 1 drawn on a helper thread while step s trains. A batch is a pure function of
// (data_seed, step, row) (data/task.h), so the thread that draws it changes no bit: a run with the prefetcher and
// one without (TrainOptions::prefetch_batches) train the same bits. The helper draws one step ahead, into the other
// of two sets of buffers, so nothing is allocated per step. An error while drawing (a text shard that cannot be read)
// is thrown by take() of the step that needed the batch.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "data/task.h"
#include "train/step.h"

namespace canonlab {

class BatchPrefetcher {
 public:
  // Draws the micro-batches of steps [first_step, last_step) of this rank's share (split) of every step.
  // enabled = false draws each step's batches on the caller's thread inside take().
  BatchPrefetcher(const Task& task, uint64_t data_seed, BatchSplit split, int T, int first_step, int last_step,
                  bool enabled);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The micro-batches of `step` (steps are taken in order, from first_step); valid until the next take().
  std::span<const Batch> take(int step);

 private:
  void draw(std::vector<Batch>& batches, int step) const;
  void work();

  const Task& task_;
  const uint64_t data_seed_;
  const BatchSplit split_;
  const int last_step_;
  std::vector<Batch> buffers_[2];
  std::mutex mutex_;
  std::condition_variable changed_;
  int requested_ = -1;  // the step the helper is asked to draw (into buffers_[requested_ % 2]); -1: none
  int ready_ = -1;      // the last step the helper finished
  bool quit_ = false;
  std::exception_ptr error_;
  std::thread helper_;  // last: started once everything above exists
};

}  // namespace canonlab
