// The element functions canonlab takes from SLEEF (vec_math.h says which and why). One translation unit includes
// sleef.h and picks the widest deterministic variant the build's instruction set has; SLEEF's "finz" functions give
// the same bits at every vector width (with FMA), so an AVX-512 and an AVX2 build of one commit agree, and a row's
// tail, padded to a full vector, goes through the same function as its body.
#if !defined(CANONLAB_NO_SLEEF)
#include <sleef.h>
#endif

#include <cmath>
#include <cstring>

#include "engine/ops/vec_math.h"

#if defined(CANONLAB_NO_SLEEF)
// The self-contained GPU test binary (tests/gpu/CMakeLists.txt), whose CPU references may not link SLEEF: libm.
#define CANONLAB_SLEEF_WIDTH 0
#elif defined(__AVX512F__)
#include <immintrin.h>
#define CANONLAB_SLEEF_WIDTH 16
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CANONLAB_SLEEF_WIDTH 8
#else
#define CANONLAB_SLEEF_WIDTH 1
#endif

namespace canonlab {
namespace {

// W floats at once: y = eˣ − 1
inline void expm1_block(float* y, const float* x) {
#if CANONLAB_SLEEF_WIDTH == 0
  *y = std::expm1(*x);
#elif CANONLAB_SLEEF_WIDTH == 16
  _mm512_storeu_ps(y, Sleef_finz_expm1f16_u10avx512f(_mm512_loadu_ps(x)));
#elif CANONLAB_SLEEF_WIDTH == 8
  _mm256_storeu_ps(y, Sleef_finz_expm1f8_u10avx2(_mm256_loadu_ps(x)));
#else
  // A build without -march (CANONLAB_NATIVE=OFF): the same finz bits where the processor has FMA (every x86-64 one
  // since 2013), SLEEF's consistent variant without FMA (other bits, the same on every such machine) elsewhere.
  static const bool fma = __builtin_cpu_supports("fma");
  *y = fma ? Sleef_finz_expm1f1_u10purecfma(*x) : Sleef_cinz_expm1f1_u10purec(*x);
#endif
}

}  // namespace

void vec_expm1(float* y, const float* x, size_t n) {
  constexpr size_t W = CANONLAB_SLEEF_WIDTH == 0 ? 1 : CANONLAB_SLEEF_WIDTH;
  size_t i = 0;
  for (; i + W <= n; i += W) expm1_block(y + i, x + i);
  if (i == n) return;
  float in[W] = {}, out[W];
  std::memcpy(in, x + i, (n - i) * sizeof(float));
  expm1_block(out, in);
  std::memcpy(y + i, out, (n - i) * sizeof(float));
}

void vec_expm1(double* y, const double* x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = std::expm1(x[i]);
}

const char* vec_math_library_variant() {
#if CANONLAB_SLEEF_WIDTH == 0
  return "libm (std::expm1; built without SLEEF)";
#elif CANONLAB_SLEEF_WIDTH == 16
  return "SLEEF finz AVX-512 (Sleef_finz_expm1f16_u10avx512f)";
#elif CANONLAB_SLEEF_WIDTH == 8
  return "SLEEF finz AVX2 (Sleef_finz_expm1f8_u10avx2)";
#else
  return __builtin_cpu_supports("fma") ? "SLEEF finz scalar FMA (Sleef_finz_expm1f1_u10purecfma)"
                                       : "SLEEF cinz scalar (Sleef_cinz_expm1f1_u10purec)";
#endif
}

}  // namespace canonlab
