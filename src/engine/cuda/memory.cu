#include "engine/cuda/memory.h"

#include <cuda_runtime_api.h>

#include <string>

#include "engine/cuda/check.h"

namespace canonlab::cuda {
namespace {

class CudaMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::cuda; }
  bool host_accessible() const override { return false; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);  // 256-byte aligned, more than the interface's 64
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // an allocation failure is not sticky; clear it so later calls are unaffected
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes on the GPU: " + cudaGetErrorString(err));
    }
    return p;
  }
  void deallocate(void* p) noexcept override { cudaFree(p); }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    CANONLAB_CUDA_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
    // from pageable memory cudaMemcpy may return before the DMA lands; a non-blocking stream would not wait for it
    CANONLAB_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    CANONLAB_CUDA_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void fill_bytes(void* dst, int byte, size_t bytes) override {
    CANONLAB_CUDA_CHECK(cudaMemset(dst, byte, bytes));
    CANONLAB_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // cudaMemset is asynchronous on device memory
  }
};

}  // namespace

DeviceMemory& device_memory() {
  static CudaMemory memory;  // stateless: nothing in it changes
  return memory;
}

}  // namespace canonlab::cuda
