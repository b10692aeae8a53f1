// The activation arena: aligned, non-overlapping allocations that stay inside their blocks. A write past a
// block's end corrupts the heap, which glibc detects when the block is freed (the test then aborts); before
// the fix the last allocation of a first-pass block could overrun by up to 63 bytes of alignment padding.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/arena.h"
#include "engine/rng.h"

namespace canonlab {
namespace {

TEST(Arena, FirstPassAllocationsStayInsideTheirBlocks) {
  for (uint64_t trial = 0; trial < 200; trial++) {
    CounterRng rng(trial, 0);
    Arena arena;
    std::vector<std::pair<unsigned char*, size_t>> chunks;
    for (int i = 0; i < 40; i++) {
      // Sizes from a few bytes to a few MiB, so some chunks end exactly at a block's usable end.
      const size_t bytes = size_t(1) << rng.below(23);
      auto* p = arena.alloc<unsigned char>(bytes + rng.below(64));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
      std::memset(p, int(i + 1), bytes);
      chunks.push_back({p, bytes});
    }
    for (size_t i = 0; i < chunks.size(); i++)
      for (size_t k = 0; k < chunks[i].second; k += 97)
        ASSERT_EQ(chunks[i].first[k], (unsigned char)(i + 1)) << "chunk " << i << " was overwritten";
  }
}

}  // namespace
}  // namespace canonlab
