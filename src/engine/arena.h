#pragma once
// Activation memory for one training step. Modules take their forward outputs and saved tensors from
// the arena; reset() at the start of each step releases everything at once. The first step discovers how
// much is needed; after that the arena is one block and the hot loop performs no heap allocation. Its blocks come
// from the run's DeviceMemory (engine/backend/memory.h), so on a GPU the step's activations live on the GPU.
#include <cstddef>
#include <algorithm>
#include <vector>

#include "engine/backend/memory.h"

namespace canonlab {

class Arena {
 public:
  explicit Arena(DeviceMemory& memory = host_memory()) : memory_(&memory) {}

  // Uninitialised storage for n elements of T, 64-byte aligned.
  template <class T>
  T* alloc(size_t n) {
    return static_cast<T*>(alloc_bytes(n * sizeof(T)));
  }
  template <class T>
  T* alloc_zeroed(size_t n) {
    T* p = alloc<T>(n);
    memory_->fill_zero(p, n * sizeof(T));
    return p;
  }

  // A position in the arena. release(mark) frees everything allocated after mark() — backward passes use it
  // to drop one block's temporaries before the next block's backward runs.
  struct Mark {
    size_t block_count, used, in_use;
  };
  Mark mark() const { return {blocks_.size(), blocks_.empty() ? 0 : blocks_.back().used, in_use_}; }
  void release(const Mark& m) {
    blocks_.resize(std::max<size_t>(m.block_count, 1));  // blocks added since the mark (first step only)
    if (m.block_count > 0) blocks_.back().used = m.used;
    else if (!blocks_.empty()) blocks_.back().used = 0;
    in_use_ = m.in_use;
  }

  // Frees everything handed out since the last reset. If the last step overflowed into extra blocks,
  // they are merged into one block sized for the high-water mark.
  void reset();

  size_t high_water_bytes() const { return high_water_; }
  Device device() const { return memory_->device(); }
  DeviceMemory& memory() const { return *memory_; }

 private:
  struct Block {
    DeviceBuffer<std::byte> memory;
    size_t capacity = 0;
    size_t used = 0;
  };
  void* alloc_bytes(size_t bytes);

  DeviceMemory* memory_;
  std::vector<Block> blocks_;
  size_t in_use_ = 0;
  size_t high_water_ = 0;
};

}  // namespace canonlab
