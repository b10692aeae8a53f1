#include "engine/arena.h"

#include <algorithm>

namespace canonlab {

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kMinBlock = size_t(1) << 20;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void* Arena::alloc_bytes(size_t bytes) {
  bytes = round_up(std::max<size_t>(bytes, 1));
  if (blocks_.empty() || blocks_.back().used + bytes > blocks_.back().capacity) {
    Block b;
    b.capacity = std::max(bytes, kMinBlock);
    b.memory = DeviceBuffer<std::byte>(*memory_, b.capacity);
    blocks_.push_back(std::move(b));
  }
  Block& b = blocks_.back();
  void* p = b.memory.data() + b.used;  // the block starts 64-byte aligned (DeviceMemory::allocate)
  b.used += bytes;
  in_use_ += bytes;
  high_water_ = std::max(high_water_, in_use_);
  return p;
}

void Arena::reset() {
  if (blocks_.size() > 1) {
    blocks_.clear();
    Block b;
    b.capacity = high_water_;
    b.memory = DeviceBuffer<std::byte>(*memory_, b.capacity);
    blocks_.push_back(std::move(b));
  }
  for (Block& b : blocks_) b.used = 0;
  in_use_ = 0;
}

}  // namespace canonlab
