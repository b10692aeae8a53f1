#pragma once
// Counter-based random numbers: every draw is a pure function of (seed, stream, counter), so the value a
// sequence or parameter receives never depends on thread count, scheduling or the order of other draws.
// The mixer is SplitMix64's finaliser applied to a Philox-style key/counter combination.
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>

namespace canonlab {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A stream of random numbers identified by (seed, stream). `counter` is the position in the stream and is
// part of the saved training state, so a resumed run draws exactly what the uninterrupted one would.
struct CounterRng {
  uint64_t key = 0;
  uint64_t counter = 0;

  CounterRng(uint64_t seed, uint64_t stream, uint64_t start = 0)
      : key(mix64(seed * 0x9e3779b97f4a7c15ULL + mix64(stream + 0x632be59bd9b4e019ULL))), counter(start) {}

  uint64_t next_u64() { return mix64(key ^ mix64(counter++ + 0xd1b54a32d192ed03ULL)); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) by rejection, so there is no modulo bias.
  uint64_t below(uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % n;
  }
  // Standard normal by Box-Muller (two uniforms per draw; the second value is discarded for simplicity).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// A uniform random permutation of `items` (Fisher-Yates, drawing from the last position down).
template <class T, size_t N>
void shuffle(std::span<T, N> items, CounterRng& rng) {
  for (size_t i = items.size(); i > 1; i--) std::swap(items[i - 1], items[rng.below(i)]);
}

// The first k positions of `items` become a uniform random draw without replacement (a partial Fisher-Yates,
// drawing front to back); the rest holds the remaining items.
template <class T, size_t N>
void partial_shuffle(std::span<T, N> items, size_t k, CounterRng& rng) {
  for (size_t i = 0; i < k; i++) std::swap(items[i], items[i + rng.below(items.size() - i)]);
}

}  // namespace canonlab
