#include "engine/backend/memory.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace canonlab {

namespace {

constexpr size_t kAlign = 64;  // one cache line, and what AVX-512 loads like

class HostMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::cpu; }
  bool host_accessible() const override { return true; }
  void* allocate(size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment
    void* p = std::aligned_alloc(kAlign, (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill_bytes(void* dst, int byte, size_t bytes) override { std::memset(dst, byte, bytes); }
};

}  // namespace

DeviceMemory& host_memory() {
  static HostMemory memory;  // stateless: nothing in it changes
  return memory;
}

}  // namespace canonlab
