// canonlab's own element loops (engine/ops/activation, vec_math.h) compiled twice for bench/vec_math_library.cpp:
// once with the build's flags (AVX-512 where -march=native has it) and once with -mno-avx512f (the AVX2 path), each in
// its own namespace, so one process times both code paths of the same source.
#include <cmath>
#include <cstddef>

#include "engine/ops/activation/activation.h"

namespace canonlab_bench::VEC_MATH_OURS_NS {

void exp(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = canonlab::vec_exp(x[i]);
}
void gelu_forward(float* y, const float* x, size_t n) { canonlab::gelu_forward(y, x, n); }
void gelu_backward(float* dx, const float* dy, const float* x, size_t n) { canonlab::gelu_backward(dx, dy, x, n); }
// ELU as it was before it called SLEEF: libm's expm1, one value at a time (the product's ELU is SLEEF's on this
// build's width, so the library's AVX2 row stands for it on the AVX2 path)
void elu_forward(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.f ? x[i] : std::expm1(x[i]);
}

}  // namespace canonlab_bench::VEC_MATH_OURS_NS
