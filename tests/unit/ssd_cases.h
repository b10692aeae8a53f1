#pragma once
// The SSD scan's test cases and inputs, shared by the CPU tests (test_ops_ssd.cpp, the element kernels on the host)
// and the GPU tests (tests/gpu/test_ssd.cpp).
#include <cstddef>
#include <ostream>
#include <vector>

#include "gradcheck.h"

namespace canonlab::test {

struct SsdCase {
  int B, Tn, H, P, G, N, chunk;
  double a_lo = -2, a_hi = -0.5;     // A range
  double dt_lo = 0.05, dt_hi = 1.0;  // dt range
};
inline std::ostream& operator<<(std::ostream& os, const SsdCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " P=" << c.P << " G=" << c.G << " N=" << c.N
            << " chunk=" << c.chunk << " A in [" << c.a_lo << ", " << c.a_hi << "] dt in [" << c.dt_lo << ", "
            << c.dt_hi << "]";
}

template <class T>
struct SsdData {
  std::vector<T> x, dt, A, Bm, Cm, dy;
  SsdData(const SsdCase& c, unsigned seed) {
    const size_t nx = (size_t)c.B * c.Tn * c.H * c.P, nt = (size_t)c.B * c.Tn * c.H,
                 nb = (size_t)c.B * c.Tn * c.G * c.N;
    x = random_vector<T>(nx, seed + 1);
    dt = random_vector<T>(nt, seed + 2, c.dt_lo, c.dt_hi);
    A = random_vector<T>(c.H, seed + 3, c.a_lo, c.a_hi);
    Bm = random_vector<T>(nb, seed + 4);
    Cm = random_vector<T>(nb, seed + 5);
    dy = random_vector<T>(nx, seed + 6);
  }
};

}  // namespace canonlab::test
