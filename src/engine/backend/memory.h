#pragma once
// Where a backend's buffers live: the one memory and buffer abstraction of every backend (host RAM here,
// engine/cuda/memory.h for GPUs). Parameters, gradients, AdamW moments and the step arena are allocated from the
// run's DeviceMemory; host code touches them only through copy_to_host / copy_from_host (checkpoints, metrics,
// probes) or, where host_accessible() (the CPU backend), directly.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"

namespace canonlab {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // True when host code may read and write this memory directly (host RAM).
  virtual bool host_accessible() const = 0;
  // Uninitialised, 64-byte aligned; never null (throws when the memory is exhausted).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  // Every byte set to `byte` (0 gives zeros, 0xff NaNs for floats: the tests' poison for "must be written").
  virtual void fill_bytes(void* dst, int byte, size_t bytes) = 0;
  void fill_zero(void* dst, size_t bytes) { fill_bytes(dst, 0, bytes); }
};

// Host RAM: what the CPU backend computes in. Stateless, so one instance serves every run.
DeviceMemory& host_memory();

// An owned array of n elements of T in some DeviceMemory (move-only RAII). Empty by default.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceMemory& memory, size_t n)
      : memory_(&memory), data_(static_cast<T*>(memory.allocate(std::max<size_t>(n, 1) * sizeof(T)))), size_(n) {}
  DeviceBuffer(DeviceMemory& memory, std::span<const T> host) : DeviceBuffer(memory, host.size()) { upload(host); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : memory_(std::exchange(o.memory_, nullptr)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      memory_ = std::exchange(o.memory_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Device memory as a span: dereference it only where memory().host_accessible().
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  DeviceMemory& memory() const { return *memory_; }

  void upload(std::span<const T> host) {
    CANONLAB_CHECK(host.size() <= size_, "DeviceBuffer::upload: " + std::to_string(host.size()) +
                                             " elements into a buffer of " + std::to_string(size_));
    if (!host.empty()) memory_->copy_from_host(data_, host.data(), host.size() * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    if (size_ > 0) memory_->copy_to_host(host.data(), data_, size_ * sizeof(T));
    return host;
  }
  void fill_zero() { fill_bytes(0); }
  void fill_bytes(int byte) {
    if (size_ > 0) memory_->fill_bytes(data_, byte, size_ * sizeof(T));
  }

 private:
  void reset() {
    if (data_) memory_->deallocate(data_);
    data_ = nullptr;
    size_ = 0;
  }
  DeviceMemory* memory_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// n elements at device address p, readable on the host: p itself where the memory is host-accessible, else a copy
// made into `storage`. For the few places that read results on the host (scoring logits, probes, checkpoints).
template <class T>
std::span<const T> host_view(DeviceMemory& memory, const T* p, size_t n, std::vector<T>& storage) {
  if (memory.host_accessible()) return {p, n};
  storage.resize(n);
  if (n > 0) memory.copy_to_host(storage.data(), p, n * sizeof(T));
  return storage;
}

}  // namespace canonlab
