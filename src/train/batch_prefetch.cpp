#include "train/batch_prefetch.h"

#include <pthread.h>
#include <signal.h>

#include "engine/error.h"

namespace canonlab {

BatchPrefetcher::BatchPrefetcher(const Task& task, uint64_t data_seed, BatchSplit split, int T, int first_step,
                                 int last_step, bool enabled)
    : task_(task), data_seed_(data_seed), split_(split), last_step_(last_step) {
  for (std::vector<Batch>& set : buffers_) {
    set.resize(size_t(split.micro_batches));
    for (Batch& b : set) b.resize(split.rows, T);
  }
  if (enabled && first_step < last_step) {
    requested_ = first_step;
    // The stop signals (train/stop_signals.h) must be taken by the training thread: a signal handled on the helper
    // reached the step loop's check a step late when the helper waited for a core (a sweep's SIGTERM checkpointed
    // step 7 instead of 6 under ctest -j2). A thread inherits its creator's mask, so the helper is created with
    // every signal blocked and the mask is restored here.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    try {
      helper_ = std::thread([this] { work(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
}

BatchPrefetcher::~BatchPrefetcher() {
  if (!helper_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  changed_.notify_all();
  helper_.join();
}

void BatchPrefetcher::draw(std::vector<Batch>& batches, int step) const {
  for (int m = 0; m < split_.micro_batches; m++)
    for (int i = 0; i < split_.rows; i++)
      task_.sample(batches[size_t(m)], i, data_seed_, uint64_t(step), uint64_t(split_.first_row(m) + i));
}

void BatchPrefetcher::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return quit_ || requested_ > ready_; });
    if (quit_) return;
    const int step = requested_;
    lock.unlock();
    std::exception_ptr error;
    try {
      draw(buffers_[step % 2], step);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    ready_ = step;
    error_ = error;
    changed_.notify_all();
  }
}

std::span<const Batch> BatchPrefetcher::take(int step) {
  std::vector<Batch>& batches = buffers_[step % 2];
  if (!helper_.joinable()) {
    draw(batches, step);
    return batches;
  }
  std::unique_lock lock(mutex_);
  CANONLAB_CHECK(requested_ == step, "BatchPrefetcher::take: steps must be taken in order");
  changed_.wait(lock, [&] { return ready_ == step; });
  if (error_) std::rethrow_exception(error_);
  // The caller trains on buffers_[step % 2] now; the helper fills the other set with the next step's batches.
  if (step + 1 < last_step_) {
    requested_ = step + 1;
    changed_.notify_all();
  }
  return batches;
}

}  // namespace canonlab
