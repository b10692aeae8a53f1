#pragma once
// Inputs for the C++ benchmarks: uniform random floats in [-1, 1), reproducible from a seed.
#include <random>
#include <vector>

inline std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v) e = dist(gen);
  return v;
}
