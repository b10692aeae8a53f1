// Run under `mpirun -np N`: the MPI communicator's collectives against the reference on every rank. Each rank
// builds every rank's contribution (they are a function of rank and index), so it can compute the expected
// rank-ordered fold itself and compare bit for bit. Values span many magnitudes so that another order or
// bracketing would change bits (checked: with 3+ ranks the reversed fold differs somewhere). Exit 0 = all agree.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/comm/launch.h"

using namespace canonlab;

namespace {

float contribution(int rank, size_t i) {
  const unsigned h = unsigned(rank) * 2654435761u ^ unsigned(i) * 40503u;
  const float mantissa = float(int(h % 2001u) - 1000) / 997.f;
  return std::ldexp(mantissa, int((h >> 11) % 40u) - 20);
}

int failures = 0;
void expect(bool ok, const char* what, int rank, size_t n) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: %s (n = %zu)\n", rank, what, n);
  failures++;
}

}  // namespace

int main(int argc, char** argv) {
  const int expected_ranks = argc > 1 ? std::atoi(argv[1]) : 0;
  try {
    const std::unique_ptr<Communicator> comm = make_communicator(detect_launch_environment(), "cpu");
    const int rank = comm->rank(), ranks = comm->size();
    expect(ranks == expected_ranks, "the communicator's size is not the -np count", rank, 0);
    bool order_matters_somewhere = false;
    for (size_t n : {size_t(0), size_t(1), size_t(ranks - 1), size_t(ranks), size_t(ranks + 1), size_t(1000),
                     size_t(12345)}) {
      auto all = std::vector<std::vector<float>>(size_t(ranks), std::vector<float>(n, 0.f));
      for (int r = 0; r < ranks; r++)
        for (size_t i = 0; i < n; i++) all[size_t(r)][i] = contribution(r, i);
      std::vector<float> mine = all[size_t(rank)];
      comm->sum_in_rank_order(mine.data(), n);
      const std::vector<float> expected = sum_in_rank_order_reference(all);
      expect(std::memcmp(mine.data(), expected.data(), n * sizeof(float)) == 0,
             "sum_in_rank_order differs from the rank-ordered left fold", rank, n);
      std::vector<std::vector<float>> reversed(all.rbegin(), all.rend());
      const std::vector<float> other = sum_in_rank_order_reference(reversed);
      order_matters_somewhere |= std::memcmp(other.data(), expected.data(), n * sizeof(float)) != 0;
    }
    if (ranks >= 3) expect(order_matters_somewhere, "the test data cannot tell summation orders apart", rank, 0);
    const double mine_d[2] = {double(rank), 0.5 + rank};
    const std::vector<double> gathered = comm->all_gather(std::span<const double>(mine_d, 2));
    for (int r = 0; r < ranks; r++)
      expect(gathered[size_t(2 * r)] == r && gathered[size_t(2 * r + 1)] == 0.5 + r, "all_gather(double)", rank, 2);
    const uint64_t mine_u = (uint64_t(1) << 63) | uint64_t(rank);
    const std::vector<uint64_t> gathered_u = comm->all_gather(std::span<const uint64_t>(&mine_u, 1));
    for (int r = 0; r < ranks; r++)
      expect(gathered_u[size_t(r)] == ((uint64_t(1) << 63) | uint64_t(r)), "all_gather(uint64)", rank, 1);
    comm->barrier();
    if (rank == 0) std::printf("%s: %d ranks, every collective equals the reference\n", comm->name().c_str(), ranks);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
