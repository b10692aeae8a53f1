#pragma once
// The delta rule's test cases and inputs, shared by the CPU tests (test_ops_delta_rule.cpp, the element kernels on
// the host) and the GPU tests (tests/gpu/test_delta_rule.cpp).
#include <cmath>
#include <cstddef>
#include <ostream>
#include <vector>

#include "gradcheck.h"

namespace canonlab::test {

enum class Gate { kNone, kMild, kStrong };

struct DeltaCase {
  int B, Tn, H, K, V, chunk;
  Gate gate;
};
inline std::ostream& operator<<(std::ostream& os, const DeltaCase& c) {
  static const char* names[] = {"none", "mild", "strong"};
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " K=" << c.K << " V=" << c.V << " chunk=" << c.chunk
            << " gate=" << names[(int)c.gate];
}

// Random inputs in the ranges the layer produces: q, k L2-normalised per head, beta in (0, 1), g <= 0 (empty for
// DeltaNet).
template <class T>
struct DeltaInputs {
  std::vector<T> q, k, v, beta, g, dout;
  const T* gp() const { return g.empty() ? nullptr : g.data(); }
};

template <class T>
void l2_normalise_rows(std::vector<T>& x, int D) {
  for (size_t r = 0; r < x.size() / D; r++) {
    double s = 0;
    for (int i = 0; i < D; i++) s += double(x[r * D + i]) * double(x[r * D + i]);
    const double inv = 1.0 / std::sqrt(s + 1e-6);
    for (int i = 0; i < D; i++) x[r * D + i] = T(double(x[r * D + i]) * inv);
  }
}

template <class T>
DeltaInputs<T> make_delta_inputs(int B, int Tn, int H, int K, int V, Gate gate, unsigned seed) {
  const size_t nt = (size_t)B * Tn * H;
  DeltaInputs<T> in;
  in.q = random_vector<T>(nt * K, seed + 1);
  in.k = random_vector<T>(nt * K, seed + 2);
  l2_normalise_rows(in.q, K);
  l2_normalise_rows(in.k, K);
  in.v = random_vector<T>(nt * V, seed + 3);
  in.beta = random_vector<T>(nt, seed + 4, 0.05, 0.95);
  if (gate == Gate::kMild) in.g = random_vector<T>(nt, seed + 5, -1.0, -0.005);
  if (gate == Gate::kStrong) in.g = random_vector<T>(nt, seed + 5, -32.0, -28.0);
  in.dout = random_vector<T>(nt * V, seed + 6);
  return in;
}

}  // namespace canonlab::test
