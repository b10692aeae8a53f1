#pragma once
// GLA's test cases and inputs, shared by the CPU tests (test_ops_gla.cpp, the element kernels on the host) and the
// GPU tests (tests/gpu/test_gla.cpp).
#include <cmath>
#include <cstddef>
#include <ostream>
#include <random>
#include <vector>

#include "gradcheck.h"

namespace canonlab::test {

enum class Gates {
  Mild,    // logsigmoid(x)/16, x ~ U(−4, 4): fla's layer at and near init
  Wide,    // U(−2, 0)
  Strong,  // −20 ± 1 on even channels, exactly 0 on odd ones: cumulative −1280 over a 64-token chunk
  Zero,    // no decay at all (plain linear attention)
};

template <class T>
std::vector<T> make_gates(size_t n, int K, Gates mode, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<T> g(n);
  for (size_t i = 0; i < n; i++) {
    const double x = u(gen);
    switch (mode) {
      case Gates::Mild:
        g[i] = T(-std::log1p(std::exp(-(8 * x - 4))) / 16);
        break;
      case Gates::Wide:
        g[i] = T(-2 * x);
        break;
      case Gates::Strong:
        g[i] = (i % K) % 2 == 0 ? T(-19 - 2 * x) : T(0);
        break;
      case Gates::Zero:
        g[i] = T(0);
        break;
    }
  }
  return g;
}

struct GlaCase {
  int B, Tn, H, K, V, chunk;
  Gates gates;
};
inline std::ostream& operator<<(std::ostream& os, const GlaCase& c) {
  return os << "B=" << c.B << " T=" << c.Tn << " H=" << c.H << " K=" << c.K << " V=" << c.V << " chunk=" << c.chunk
            << " gates=" << int(c.gates);
}

template <class T>
struct GlaInputs {
  std::vector<T> q, k, v, g, dout;
  GlaInputs(const GlaCase& p, unsigned seed) {
    const size_t nk = (size_t)p.B * p.Tn * p.H * p.K, nv = (size_t)p.B * p.Tn * p.H * p.V;
    q = random_vector<T>(nk, seed + 1);
    k = random_vector<T>(nk, seed + 2);
    v = random_vector<T>(nv, seed + 3);
    g = make_gates<T>(nk, p.K, p.gates, seed + 4);
    dout = random_vector<T>(nv, seed + 5);
  }
};

}  // namespace canonlab::test
