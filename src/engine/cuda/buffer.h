#pragma once
// Device memory owned RAII-style: one cudaMalloc per buffer, freed in the destructor. The step arena and the
// parameter store allocate a few large buffers like this and carve them up; kernels take plain pointers.
// upload, download and fill_bytes are synchronous: each has completed when it returns, so it is ordered with
// every stream, including non-blocking ones (tests, checkpoints, probes). The training loop uses stream-ordered
// copies instead. download does not wait for other streams: synchronise the stream that wrote the buffer first.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/types.h"

namespace canonlab::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count == 0) return;
    const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // an allocation failure is not sticky; clear it so later calls are unaffected
      throw Error("cannot allocate " + std::to_string(count * sizeof(T)) + " bytes on the GPU: " +
                  cudaGetErrorString(err));
    }
  }
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), count_(o.count_) {
    o.data_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (data_) cudaFree(data_);
      data_ = o.data_;
      count_ = o.count_;
      o.data_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }

  void upload(std::span<const T> host) {
    CANONLAB_CHECK(host.size() <= count_, "DeviceBuffer::upload: " + std::to_string(host.size()) +
                                              " elements into a buffer of " + std::to_string(count_));
    if (host.empty()) return;
    CANONLAB_CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    // from pageable memory cudaMemcpy may return before the DMA lands; a non-blocking stream would not wait for it
    CANONLAB_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) CANONLAB_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Every byte set to `byte` (0 gives zeros, 0xff gives NaNs for floats: a poison for "must be written" checks).
  void fill_bytes(int byte) {
    if (!count_) return;
    CANONLAB_CUDA_CHECK(cudaMemset(data_, byte, count_ * sizeof(T)));
    CANONLAB_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // cudaMemset is asynchronous on device memory
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace canonlab::cuda
