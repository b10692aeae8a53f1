#pragma once
// Memory that hands out addresses without storage and counts what is live: the resource estimate runs a model's real
// construction, forward, backward and update over it (engine/backend/counting_backend.h, engine/cuda/counting_cuda.h),
// so `--dry-run` reports what the modules, the arena and the backend actually allocate, on any device, without
// allocating it. Nothing ever reads or writes through its addresses: copies and fills do nothing, and it answers
// host_accessible() with true, so host code takes no copies of what it would only look at.
#include <cstddef>
#include <cstdint>
#include <map>

#include "engine/backend/memory.h"

namespace canonlab {

class CountingMemory final : public DeviceMemory {
 public:
  explicit CountingMemory(Device device) : device_(device) {}
  Device device() const override { return device_; }
  bool host_accessible() const override { return true; }
  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void copy_from_host(void*, const void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  void fill_bytes(void*, int, size_t) override {}

  double live_bytes() const { return live_; }
  double peak_bytes() const { return peak_; }

 private:
  Device device_;
  uintptr_t next_ = 4096;  // never 0: a counted buffer is not null
  std::map<uintptr_t, size_t> sizes_;
  double live_ = 0, peak_ = 0;
};

}  // namespace canonlab
