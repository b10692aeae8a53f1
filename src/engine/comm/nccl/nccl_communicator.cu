#include "engine/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"

namespace canonlab {

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string(what) + " failed: " + ncclGetErrorString(r));
}
void check_cuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw Error(std::string(what) + " failed: " + cudaGetErrorString(r));
}

// out[i] = ((chunks[0][i] + chunks[1][i]) + chunks[2][i]) + ...; chunks: (ranks, stride), out: (n)
__global__ void fold_chunks_in_rank_order(float* out, const float* chunks, size_t n, size_t stride, int ranks) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = chunks[i];
  for (int r = 1; r < ranks; r++) sum = sum + chunks[size_t(r) * stride + i];
  out[i] = sum;
}

// Device scratch that grows to the largest request and is reused.
class Scratch {
 public:
  ~Scratch() {
    if (data_) cudaFree(data_);
  }
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      if (data_) cudaFree(data_);
      data_ = nullptr;
      check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc (NCCL scratch)");
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, const NcclUniqueId& id, int device) : rank_(rank), size_(size) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId unique;
    static_assert(sizeof(unique) == kNcclUniqueIdBytes);
    std::memcpy(&unique, id.data(), sizeof(unique));
    check_nccl(ncclCommInitRank(&comm_, size, unique, rank), "ncclCommInitRank");
    int version = 0;
    ncclGetVersion(&version);
    name_ = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
            std::to_string(version % 100);
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  // data: (n) device floats. See the header for the three phases.
  void sum_in_rank_order(float* data, size_t n) override {
    if (size_ == 1 || n == 0) return;
    const size_t ranks = size_t(size_), stride = (n + ranks - 1) / ranks;  // padded chunk length
    auto chunk_begin = [&](size_t r) { return std::min(n, r * stride); };
    auto chunk_size = [&](size_t r) { return std::min(n, (r + 1) * stride) - chunk_begin(r); };
    const size_t mine = chunk_size(size_t(rank_));
    float* received = static_cast<float*>(received_.get(ranks * stride * sizeof(float)));  // (ranks, stride)
    float* gathered = static_cast<float*>(gathered_.get(ranks * stride * sizeof(float)));  // (ranks, stride)
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (size_t r = 0; r < ranks; r++) {
      if (chunk_size(r) > 0)
        check_nccl(ncclSend(data + chunk_begin(r), chunk_size(r), ncclFloat32, int(r), comm_, stream_), "ncclSend");
      if (mine > 0) check_nccl(ncclRecv(received + r * stride, mine, ncclFloat32, int(r), comm_, stream_), "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (gradient reduce-scatter)");
    float* folded = gathered + size_t(rank_) * stride;
    if (mine > 0) {
      const unsigned threads = 256, blocks = unsigned((mine + threads - 1) / threads);
      fold_chunks_in_rank_order<<<blocks, threads, 0, stream_>>>(folded, received, mine, stride, size_);
      check_cuda(cudaGetLastError(), "fold_chunks_in_rank_order");
    }
    check_nccl(ncclAllGather(folded, gathered, stride, ncclFloat32, comm_, stream_), "ncclAllGather");
    check_cuda(cudaMemcpyAsync(data, gathered, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync (gathered gradients)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (gradient sum)");
  }

  std::vector<double> all_gather(std::span<const double> mine) override { return gather_host(mine, ncclFloat64); }
  std::vector<uint64_t> all_gather(std::span<const uint64_t> mine) override { return gather_host(mine, ncclUint64); }

  void barrier() override {
    int* one = static_cast<int*>(barrier_.get(sizeof(int)));
    check_cuda(cudaMemsetAsync(one, 0, sizeof(int), stream_), "cudaMemsetAsync");
    check_nccl(ncclAllReduce(one, one, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce (barrier)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (barrier)");
  }
  [[noreturn]] void abort(int exit_code) override {
    std::fflush(nullptr);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    std::_Exit(exit_code);
  }

 private:
  template <class V>
  std::vector<V> gather_host(std::span<const V> mine, ncclDataType_t type) {
    const size_t count = mine.size();
    V* device = static_cast<V*>(host_gather_.get((size_t(size_) + 1) * count * sizeof(V) + sizeof(V)));
    V* send = device + size_t(size_) * count;
    check_cuda(cudaMemcpyAsync(send, mine.data(), count * sizeof(V), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    check_nccl(ncclAllGather(send, device, count, type, comm_, stream_), "ncclAllGather");
    std::vector<V> all(size_t(size_) * count);
    check_cuda(cudaMemcpyAsync(all.data(), device, all.size() * sizeof(V), cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (all_gather)");
    return all;
  }

  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::string name_;
  Scratch received_, gathered_, barrier_, host_gather_;
};

}  // namespace

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId unique;
  check_nccl(ncclGetUniqueId(&unique), "ncclGetUniqueId");
  NcclUniqueId id;
  std::memcpy(id.data(), &unique, sizeof(unique));
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, const NcclUniqueId& id, int device) {
  return std::make_unique<NcclCommunicator>(rank, size, id, device);
}

}  // namespace canonlab
