// The NCCL communicator on real GPUs: one rank (any machine with a GPU) and, where there are two or more GPUs, two
// ranks in two threads of this process, one device each. Its rank-ordered sum must equal the CPU left fold bit for
// bit (the MPI backend's and one process's micro-batch result), all_gather must concatenate in rank order, and the
// barrier must return. Skips with "no CUDA device" without a GPU; its own binary, because it links libnccl.so.2.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/comm/nccl/nccl_communicator.h"

namespace canonlab {
namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

float contribution(int rank, size_t i) {
  const unsigned h = unsigned(rank) * 2654435761u ^ unsigned(i) * 40503u;
  return std::ldexp(float(int(h % 2001u) - 1000) / 997.f, int((h >> 11) % 40u) - 20);
}

// What rank `rank` of `ranks` holds after sum_in_rank_order on its device, for n elements.
std::vector<float> run_rank(Communicator& comm, int rank, size_t n) {
  std::vector<float> host(n);
  for (size_t i = 0; i < n; i++) host[i] = contribution(rank, i);
  float* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, std::max<size_t>(1, n) * sizeof(float)), cudaSuccess);
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  comm.sum_in_rank_order(device, n);
  cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  return host;
}

TEST(NcclCommunicator, OneRankIsTheIdentity) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto comm = make_nccl_communicator(0, 1, make_nccl_unique_id(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_NE(comm->name().find("NCCL"), std::string::npos);
  const std::vector<float> got = run_rank(*comm, 0, 1000);
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], contribution(0, i)) << i;
  const double mine[2] = {1.5, -2.0};
  EXPECT_EQ(comm->all_gather(std::span<const double>(mine, 2)), (std::vector<double>{1.5, -2.0}));
  comm->barrier();
}

TEST(NcclCommunicator, TwoRanksSumInRankOrderBitForBit) {
  const int gpus = device_count();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device";
  if (gpus < 2) GTEST_SKIP() << "one GPU: NCCL needs a device per rank (" << gpus << " here)";
  const NcclUniqueId id = make_nccl_unique_id();
  for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(1001), size_t(1) << 20}) {
    std::vector<std::vector<float>> got(2);
    std::vector<std::vector<double>> gathered(2);
    std::vector<std::thread> ranks;
    const NcclUniqueId round_id = n == 1 ? id : make_nccl_unique_id();
    for (int r = 0; r < 2; r++)
      ranks.emplace_back([&, r] {
        cudaSetDevice(r);
        const auto comm = make_nccl_communicator(r, 2, round_id, r);
        got[size_t(r)] = run_rank(*comm, r, n);
        const double mine = 10.0 + r;
        gathered[size_t(r)] = comm->all_gather(std::span<const double>(&mine, 1));
        comm->barrier();
      });
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < 2; r++) {
      ASSERT_EQ(got[size_t(r)].size(), n);
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(got[size_t(r)][i], contribution(0, i) + contribution(1, i)) << "rank " << r << ", element " << i;
      EXPECT_EQ(gathered[size_t(r)], (std::vector<double>{10.0, 11.0}));
    }
  }
}

}  // namespace
}  // namespace canonlab
