#pragma once
// Reference int8 linear layer: y = (x · Wqᵀ) ⊙ scale + b, W in PyTorch's (OUT, IN) layout held as int8 with one
// float scale per output row (quantize.h). Plain loops, one thread, double accumulators; fast.h is tested
// against it.
#include <cstddef>
#include <cstdint>

namespace canonlab {

// y: (N, OUT) rows of stride ldy; x: (N, IN) rows of stride ldx; q: (OUT, IN); scale: (OUT); b: (OUT) or nullptr
template <class T>
void int8_linear_forward_naive(T* y, int ldy, const T* x, int ldx, const int8_t* q, const float* scale, const T* b,
                               int N, int IN, int OUT) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + size_t(n) * ldx;
    T* yn = y + size_t(n) * ldy;
    for (int o = 0; o < OUT; o++) {
      const int8_t* qo = q + size_t(o) * IN;
      double acc = 0;
      for (int i = 0; i < IN; i++) acc += double(xn[i]) * double(qo[i]);
      yn[o] = T(acc * double(scale[o]) + (b ? double(b[o]) : 0.0));
    }
  }
}

}  // namespace canonlab
