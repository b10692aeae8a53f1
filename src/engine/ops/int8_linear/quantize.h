#pragma once
// Weight-only int8 with one scale per output channel (canonlab eval/generate --int8, docs/engine.md "int8 inference"):
//   scale[o] = max_i |W[o,i]| / 127,   Wq[o,i] = round_half_even(W[o,i] / scale[o]) clamped to [-127, 127]
// so that W[o,i] ≈ Wq[o,i] * scale[o] with an error of at most scale[o] / 2. -128 is never used: the grid is
// symmetric and 0 is exact. A row of zeros gets scale 0 and Wq 0 (its outputs are the bias, as in fp32).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace canonlab {

// w: (OUT, IN) -> q: (OUT, IN) in [-127, 127], scale: (OUT). The division and the rounding are in float (the
// scale is a float), rounding to nearest with ties to even (std::nearbyint in the default rounding mode).
template <class T>
void quantize_int8_rows(int8_t* q, float* scale, const T* w, int OUT, int IN) {
  for (int o = 0; o < OUT; o++) {
    const T* wo = w + size_t(o) * IN;
    int8_t* qo = q + size_t(o) * IN;
    float amax = 0.0f;
    for (int i = 0; i < IN; i++) amax = std::max(amax, std::fabs(float(wo[i])));
    const float s = amax / 127.0f;
    scale[o] = s;
    for (int i = 0; i < IN; i++) {
      const float r = s > 0.0f ? std::nearbyint(float(wo[i]) / s) : 0.0f;
      qo[i] = int8_t(std::clamp(r, -127.0f, 127.0f));
    }
  }
}

// q: (OUT, IN), scale: (OUT) -> w: (OUT, IN) = q * scale, the weights the int8 layer computes with.
template <class T>
void dequantize_int8_rows(T* w, const int8_t* q, const float* scale, int OUT, int IN) {
  for (int o = 0; o < OUT; o++)
    for (int i = 0; i < IN; i++) w[size_t(o) * IN + i] = T(float(q[size_t(o) * IN + i]) * scale[o]);
}

}  // namespace canonlab
