#pragma once
// Grouped-query attention's head repetition (repeat_heads.h) as element kernels: the GPU's algorithm (cuda.cu runs
// them one thread per element), which the CPU also runs (HostLaunch), so the two give the same bits.
#include <cstddef>
#include <string>

#include "engine/error.h"
#include "engine/ops/element_kernels.h"

namespace canonlab {

inline void check_repeat_heads(int heads, int group, int D) {
  CANONLAB_CHECK(heads >= 1 && group >= 1 && D >= 1, "repeat_heads: heads " + std::to_string(heads) + ", group " +
                                                         std::to_string(group) + " and head dim " + std::to_string(D) +
                                                         " must all be >= 1");
}

namespace repeat_heads_elements {

// One output element each: y[n, (h·group + g)·D + d] = x[n, h·D + d].
template <class T>
struct Forward {
  T* y;
  const T* x;
  int ldy, ldx, group, D, width;  // width = heads · group · D: one output row
  CANONLAB_HD void operator()(size_t i) const {
    const size_t n = i / (size_t)width;
    const int c = int(i % (size_t)width), h = c / D / group, d = c % D;
    y[n * ldy + c] = x[n * ldx + (size_t)h * D + d];
  }
};

// One input gradient each: dx[n, h·D + d] = Σ_g dy[n, (h·group + g)·D + d], g = 0, 1, ... in order, in double.
template <class T>
struct Backward {
  T* dx;
  const T* dy;
  int lddx, lddy, group, D, width;  // width = heads · D: one input row
  CANONLAB_HD void operator()(size_t i) const {
    const size_t n = i / (size_t)width;
    const int c = int(i % (size_t)width), h = c / D, d = c % D;
    const T* g0 = dy + n * lddy + (size_t)h * group * D + d;
    double sum = 0;
    for (int g = 0; g < group; g++) sum += double(g0[(size_t)g * D]);
    dx[n * lddx + c] = T(sum);
  }
};

}  // namespace repeat_heads_elements

template <class T, class Launch>
void repeat_heads_forward_elements(const Launch& launch, T* y, int ldy, const T* x, int ldx, int N, int heads,
                                   int group, int D) {
  const int width = heads * group * D;
  launch((size_t)N * width, repeat_heads_elements::Forward<T>{y, x, ldy, ldx, group, D, width});
}

template <class T, class Launch>
void repeat_heads_backward_elements(const Launch& launch, T* dx, int lddx, const T* dy, int lddy, int N, int heads,
                                    int group, int D) {
  const int width = heads * D;
  launch((size_t)N * width, repeat_heads_elements::Backward<T>{dx, dy, lddx, lddy, group, D, width});
}

}  // namespace canonlab
