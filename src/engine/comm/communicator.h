#pragma once
// The data-parallel communicator: what N training processes (ranks) exchange each step. canonlab does not
// implement collectives; the backends wrap the libraries clusters already run: MPI (Open MPI from Debian) for
// CPU processes, NCCL for CUDA devices (engine/comm/nccl/). A single process uses SingleProcess, whose
// collectives are identities, so the training loop is one code path for 1 and N ranks.
//
// Determinism: MPI_Allreduce and ncclAllReduce may add the ranks' contributions in any order and bracketing
// (trees, rings, depending on sizes and topology). Sums here are always the left fold in rank order,
//   sum = (((x_0 + x_1) + x_2) + ... + x_{N-1}),
// element by element, computed by one rank per chunk of the buffer and then shared (reduce-scatter by
// all-to-all, fold, all-gather). So N ranks give the bits of one process that folds N micro-batches' gradients in
// order (train.micro_batches = N), and the same N gives the same bits on every run.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace canonlab {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "single process", "MPI (Open MPI 4.1.4)", "NCCL 2.27"

  // data: this rank's n floats (host memory for MPI, device memory for NCCL); on return every rank holds the
  // rank-ordered left fold of all ranks' data.
  virtual void sum_in_rank_order(float* data, size_t n) = 0;
  // Every rank's `mine` (the same count on each), concatenated in rank order, on every rank. Host memory.
  virtual std::vector<double> all_gather(std::span<const double> mine) = 0;
  virtual std::vector<uint64_t> all_gather(std::span<const uint64_t> mine) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job with `exit_code` (after this rank printed why). Does not return.
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single process"; }
  void sum_in_rank_order(float*, size_t) override {}
  std::vector<double> all_gather(std::span<const double> mine) override { return {mine.begin(), mine.end()}; }
  std::vector<uint64_t> all_gather(std::span<const uint64_t> mine) override { return {mine.begin(), mine.end()}; }
  void barrier() override {}
  [[noreturn]] void abort(int exit_code) override;
};

// The chunk of an n-element buffer that `rank` of `ranks` folds: [begin, end). Chunks are contiguous, in rank
// order, and differ in size by at most one element (the first n % ranks chunks are one longer).
struct Chunk {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
inline Chunk chunk_of(size_t n, int ranks, int rank) {
  const size_t base = n / size_t(ranks), extra = n % size_t(ranks), r = size_t(rank);
  const size_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

// The reference the backends are tested against: contributions[r] is rank r's buffer; returns the left fold.
std::vector<float> sum_in_rank_order_reference(const std::vector<std::vector<float>>& contributions);

}  // namespace canonlab
