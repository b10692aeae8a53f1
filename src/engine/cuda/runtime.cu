// Device queries, streams, timers and the error reporting every CUDA call site uses.
#include <cuda_runtime_api.h>

#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/cublaslt_loader.h"
#include "engine/cuda/runtime.h"

namespace canonlab::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(std::string("CUDA error: ") + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ") in " + call +
              " at " + file + ":" + std::to_string(line));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  // a status from the loader's stand-in (the library was never opened) says why
  const std::string not_loaded = cublaslt_load_error();
  throw Error("cuBLASLt error: status " + std::to_string(status) + " in " + call + " at " + file + ":" +
              std::to_string(line) + (not_loaded.empty() ? "" : ": " + not_loaded));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string no_device_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaGetErrorString(err);
  }
  return n == 0 ? "the CUDA runtime reports 0 devices" : "";
}

DeviceInfo device_info(int index) {
  cudaDeviceProp p{};
  CANONLAB_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceInfo d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.memory_bytes = p.totalGlobalMem;
  return d;
}

void select_device(int index, const std::string& setting) {
  const int n = device_count();
  if (n == 0) throw Error(setting + ": no CUDA device on this machine (" + no_device_reason() + "); use train.device=cpu");
  if (index < 0 || index >= n)
    throw Error(setting + ": there is no CUDA device " + std::to_string(index) + "; this machine has " +
                std::to_string(n) + " (cuda:0" + (n > 1 ? " .. cuda:" + std::to_string(n - 1) : std::string()) + ")");
  CANONLAB_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize(CudaStream stream) { CANONLAB_CUDA_CHECK(cudaStreamSynchronize(stream)); }

Stream::Stream() { CANONLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

EventTimer::EventTimer() {
  CANONLAB_CUDA_CHECK(cudaEventCreate(&begin_));
  CANONLAB_CUDA_CHECK(cudaEventCreate(&end_));
}
EventTimer::~EventTimer() {
  cudaEventDestroy(begin_);
  cudaEventDestroy(end_);
}
void EventTimer::start(CudaStream stream) { CANONLAB_CUDA_CHECK(cudaEventRecord(begin_, stream)); }
float EventTimer::stop(CudaStream stream) {
  CANONLAB_CUDA_CHECK(cudaEventRecord(end_, stream));
  CANONLAB_CUDA_CHECK(cudaEventSynchronize(end_));
  float ms = 0;
  CANONLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
  return ms;
}

void* pinned_allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes > 0 ? bytes : 1);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory: " + cudaGetErrorString(err));
  }
  return p;
}

void pinned_free(void* p) noexcept {
  if (p) cudaFreeHost(p);
}

void memcpy_async(CudaStream stream, void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  const cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
  CANONLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream));
}

// Timing off: only ordering is asked of these, and untimed events are the cheaper kind.
Event::Event() { CANONLAB_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}
void Event::record(CudaStream stream) { CANONLAB_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::synchronize() const { CANONLAB_CUDA_CHECK(cudaEventSynchronize(event_)); }

}  // namespace canonlab::cuda
