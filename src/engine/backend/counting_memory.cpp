#include "engine/backend/counting_memory.h"

#include <algorithm>

namespace canonlab {

void* CountingMemory::allocate(size_t bytes) {
  const uintptr_t at = next_;
  // Distinct addresses, 256-byte aligned as cudaMalloc's; an absurd size (a config the estimate is about to refuse)
  // advances them by at most 1 TiB, so they never wrap.
  next_ += (std::min<size_t>(std::max<size_t>(bytes, 1), size_t(1) << 40) + 255) / 256 * 256;
  sizes_[at] = bytes;
  live_ += double(bytes);
  peak_ = std::max(peak_, live_);
  return reinterpret_cast<void*>(at);
}

void CountingMemory::deallocate(void* p) noexcept {
  const auto it = sizes_.find(reinterpret_cast<uintptr_t>(p));
  if (it == sizes_.end()) return;
  live_ -= double(it->second);
  sizes_.erase(it);
}

}  // namespace canonlab
