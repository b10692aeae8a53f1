// canonlab's vectorised element math (engine/ops/vec_math.h: exp, erfc, Φ and φ, compiled loops) against SLEEF 3.5's
// deterministic vector functions (Sleef_finz_*: the same bits at every vector width, FMA), on the AVX-512 and the
// AVX2 code path, at the size of E1-Bk0's MLP activations (3136 x 512 floats), one thread (docs/engine.md, "Element
// math: ours or SLEEF"). SLEEF is dlopen()ed, so nothing but libdl is linked and the target builds without it:
//
//   build/bench/vec_math_library [--sleef /usr/lib/x86_64-linux-gnu/libsleef.so.3] [--trials 9]
//
// Per function: ns per element (best of --trials passes over the buffer) and the largest relative error against
// libm in double over the same inputs (x = 4 sin(0.37 i); GELU's backward relative to dy (|Φ| + |x φ|), as its
// derivative crosses zero).
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/ops/vec_math.h"

namespace canonlab_bench {
namespace native {
void exp(float* y, const float* x, size_t n);
void gelu_forward(float* y, const float* x, size_t n);
void gelu_backward(float* dx, const float* dy, const float* x, size_t n);
void elu_forward(float* y, const float* x, size_t n);
}  // namespace native
namespace avx2 {
void exp(float* y, const float* x, size_t n);
void gelu_forward(float* y, const float* x, size_t n);
void gelu_backward(float* dx, const float* dy, const float* x, size_t n);
void elu_forward(float* y, const float* x, size_t n);
}  // namespace avx2
}  // namespace canonlab_bench

namespace {

using F16 = __m512 (*)(__m512);
using F8 = __m256 (*)(__m256);

struct Sleef {
  void* handle = nullptr;
  F16 exp16 = nullptr, erfc16 = nullptr, erf16 = nullptr, expm116 = nullptr;
  F8 exp8 = nullptr, erfc8 = nullptr, erf8 = nullptr, expm18 = nullptr;
};

__attribute__((target("avx512f"))) void map16(F16 f, float* y, const float* x, size_t n) {
  for (size_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
}
__attribute__((target("avx2"))) void map8(F8 f, float* y, const float* x, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
}
// GELU through SLEEF: y = x · erfc(−x/√2)/2, or x · (1 + erf(x/√2))/2; the backward dy (Φ + x φ) with erfc and exp
__attribute__((target("avx512f"))) void gelu16(F16 erfc, float* y, const float* x, size_t n) {
  const __m512 c = _mm512_set1_ps(-0.70710678118654752440f), h = _mm512_set1_ps(0.5f);
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(v, _mm512_mul_ps(h, erfc(_mm512_mul_ps(v, c)))));
  }
}
__attribute__((target("avx512f"))) void gelu16_erf(F16 erf, float* y, const float* x, size_t n) {
  const __m512 c = _mm512_set1_ps(0.70710678118654752440f), h = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f);
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(h, v), _mm512_add_ps(one, erf(_mm512_mul_ps(v, c)))));
  }
}
__attribute__((target("avx512f"))) void gelu16_backward(F16 erfc, F16 exp, float* dx, const float* dy, const float* x,
                                                       size_t n) {
  const __m512 c = _mm512_set1_ps(-0.70710678118654752440f), h = _mm512_set1_ps(0.5f),
               mh = _mm512_set1_ps(-0.5f), k = _mm512_set1_ps(0.39894228040143267794f);
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 cdf = _mm512_mul_ps(h, erfc(_mm512_mul_ps(v, c)));
    const __m512 pdf = _mm512_mul_ps(k, exp(_mm512_mul_ps(mh, _mm512_mul_ps(v, v))));
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), _mm512_add_ps(cdf, _mm512_mul_ps(v, pdf))));
  }
}
__attribute__((target("avx2"))) void gelu8(F8 erfc, float* y, const float* x, size_t n) {
  const __m256 c = _mm256_set1_ps(-0.70710678118654752440f), h = _mm256_set1_ps(0.5f);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_mul_ps(h, erfc(_mm256_mul_ps(v, c)))));
  }
}
__attribute__((target("avx2"))) void gelu8_backward(F8 erfc, F8 exp, float* dx, const float* dy, const float* x,
                                                    size_t n) {
  const __m256 c = _mm256_set1_ps(-0.70710678118654752440f), h = _mm256_set1_ps(0.5f),
               mh = _mm256_set1_ps(-0.5f), k = _mm256_set1_ps(0.39894228040143267794f);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 cdf = _mm256_mul_ps(h, erfc(_mm256_mul_ps(v, c)));
    const __m256 pdf = _mm256_mul_ps(k, exp(_mm256_mul_ps(mh, _mm256_mul_ps(v, v))));
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), _mm256_add_ps(cdf, _mm256_mul_ps(v, pdf))));
  }
}
// ELU through SLEEF's expm1 (x > 0 passes through)
__attribute__((target("avx512f"))) void elu16(F16 expm1, float* y, const float* x, size_t n) {
  const __m512 z = _mm512_setzero_ps();
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 pos = _mm512_cmp_ps_mask(v, z, _CMP_GT_OQ);
    _mm512_storeu_ps(y + i, _mm512_mask_blend_ps(pos, expm1(_mm512_min_ps(v, z)), v));
  }
}
__attribute__((target("avx2"))) void elu8(F8 expm1, float* y, const float* x, size_t n) {
  const __m256 z = _mm256_setzero_ps();
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(expm1(_mm256_min_ps(v, z)), v, _mm256_cmp_ps(v, z, _CMP_GT_OQ)));
  }
}

template <class Fn>
double best_ns_per_element(Fn fn, size_t n, int trials) {
  double best = 1e30;
  for (int t = 0; t < trials; t++) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count();
    best = std::min(best, ns / double(n));
  }
  return best;
}

template <class Ref>
double max_rel_err(const std::vector<float>& got, const std::vector<float>& x, Ref ref) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double want = ref(double(x[i]));
    if (std::abs(want) < 1e-30) continue;
    worst = std::max(worst, std::abs(double(got[i]) - want) / std::abs(want));
  }
  return worst;
}

bool cpu_has(const char* flag) {
  __builtin_cpu_init();
  return std::strcmp(flag, "avx512f") == 0 ? __builtin_cpu_supports("avx512f") : __builtin_cpu_supports("avx2");
}

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "?";
  char line[512];
  std::string m = "?";
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "model name", 10) == 0) {
      m = std::strchr(line, ':') ? std::strchr(line, ':') + 2 : line;
      m.erase(m.find_last_not_of("\n ") + 1);
      break;
    }
  std::fclose(f);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sleef_path = "libsleef.so.3";
  int trials = 9;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--sleef" && i + 1 < argc) sleef_path = argv[++i];
    else if (a == "--trials" && i + 1 < argc) trials = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: vec_math_library [--sleef PATH] [--trials N]; unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(1);  // the activation loops open a parallel region on large buffers
  Sleef s;
  s.handle = dlopen(sleef_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!s.handle) std::printf("SLEEF not loaded (%s): only canonlab's rows below\n", dlerror());
  auto sym = [&](const char* name) { return s.handle ? dlsym(s.handle, name) : nullptr; };
  s.exp16 = F16(sym("Sleef_finz_expf16_u10avx512f"));
  s.erfc16 = F16(sym("Sleef_finz_erfcf16_u15avx512f"));
  s.erf16 = F16(sym("Sleef_finz_erff16_u10avx512f"));
  s.expm116 = F16(sym("Sleef_finz_expm1f16_u10avx512f"));
  s.exp8 = F8(sym("Sleef_finz_expf8_u10avx2"));
  s.erfc8 = F8(sym("Sleef_finz_erfcf8_u15avx2"));
  s.erf8 = F8(sym("Sleef_finz_erff8_u10avx2"));
  s.expm18 = F8(sym("Sleef_finz_expm1f8_u10avx2"));

  const size_t n = 3136 * 512;
  std::vector<float> x(n), dy(n), y(n);
  for (size_t i = 0; i < n; i++) x[i] = float(4 * std::sin(0.37 * double(i))), dy[i] = float(std::cos(0.11 * double(i)));
  const auto ref_exp = [](double v) { return std::exp(v); };
  const auto ref_gelu = [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); };
  const auto ref_elu = [](double v) { return v > 0 ? v : std::expm1(v); };
  // GELU's derivative Φ + x φ crosses zero (x ≈ −0.75), so its error is relative to dy (|Φ| + |x φ|)
  std::vector<double> ref_dx(n), scale_dx(n);
  for (size_t i = 0; i < n; i++) {
    const double v = x[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0)), pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    ref_dx[i] = double(dy[i]) * (cdf + v * pdf);
    scale_dx[i] = std::abs(double(dy[i])) * (cdf + std::abs(v) * pdf);
  }
  auto dx_err = [&]() {
    double w = 0;
    for (size_t i = 0; i < n; i++)
      if (scale_dx[i] > 1e-30) w = std::max(w, std::abs(double(y[i]) - ref_dx[i]) / scale_dx[i]);
    return w;
  };

  std::printf("CPU: %s; AVX-512: %s, AVX2: %s; %zu floats, one thread, best of %d; canonlab's ELU calls %s\n\n",
              cpu_model().c_str(), cpu_has("avx512f") ? "yes" : "no", cpu_has("avx2") ? "yes" : "no", n, trials,
              canonlab::vec_math_library_variant());
  std::printf("| function | path | canonlab ns/elem | SLEEF finz ns/elem | SLEEF / canonlab | canonlab max rel err | SLEEF max rel err |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  auto row = [&](const char* fn, const char* path, double ours_ns, double ours_err, double sleef_ns, double sleef_err) {
    if (sleef_ns > 0)
      std::printf("| %s | %s | %.3f | %.3f | %.2f | %.2g | %.2g |\n", fn, path, ours_ns, sleef_ns, sleef_ns / ours_ns,
                  ours_err, sleef_err);
    else
      std::printf("| %s | %s | %.3f | - | - | %.2g | - |\n", fn, path, ours_ns, ours_err);
  };
  struct Path {
    const char* name;
    bool available;
    void (*exp)(float*, const float*, size_t);
    void (*gelu)(float*, const float*, size_t);
    void (*gelu_bwd)(float*, const float*, const float*, size_t);
    void (*elu)(float*, const float*, size_t);
  };
  const Path paths[] = {
      {"AVX-512", cpu_has("avx512f"), canonlab_bench::native::exp, canonlab_bench::native::gelu_forward,
       canonlab_bench::native::gelu_backward, canonlab_bench::native::elu_forward},
      {"AVX2", cpu_has("avx2"), canonlab_bench::avx2::exp, canonlab_bench::avx2::gelu_forward,
       canonlab_bench::avx2::gelu_backward, canonlab_bench::avx2::elu_forward},
  };
  for (const Path& p : paths) {
    if (!p.available) continue;
    const bool wide = p.name[1] == 'V' && p.name[3] == '-';  // "AVX-512"
    double t_ours, e_ours, t_s = 0, e_s = 0;
    // exp
    t_ours = best_ns_per_element([&] { p.exp(y.data(), x.data(), n); }, n, trials);
    e_ours = max_rel_err(y, x, ref_exp);
    if (wide ? bool(s.exp16) : bool(s.exp8)) {
      t_s = best_ns_per_element([&] { wide ? map16(s.exp16, y.data(), x.data(), n) : map8(s.exp8, y.data(), x.data(), n); }, n, trials);
      e_s = max_rel_err(y, x, ref_exp);
    }
    row("exp", p.name, t_ours, e_ours, t_s, e_s);
    // GELU forward (erfc)
    t_s = 0;
    t_ours = best_ns_per_element([&] { p.gelu(y.data(), x.data(), n); }, n, trials);
    e_ours = max_rel_err(y, x, ref_gelu);
    if (wide ? bool(s.erfc16) : bool(s.erfc8)) {
      t_s = best_ns_per_element([&] { wide ? gelu16(s.erfc16, y.data(), x.data(), n) : gelu8(s.erfc8, y.data(), x.data(), n); }, n, trials);
      e_s = max_rel_err(y, x, ref_gelu);
    }
    row("GELU forward, erfc", p.name, t_ours, e_ours, t_s, e_s);
    if (wide && s.erf16) {
      t_s = best_ns_per_element([&] { gelu16_erf(s.erf16, y.data(), x.data(), n); }, n, trials);
      e_s = max_rel_err(y, x, ref_gelu);
      row("GELU forward, 1 + erf", p.name, t_ours, e_ours, t_s, e_s);
    }
    // GELU backward
    t_s = 0;
    t_ours = best_ns_per_element([&] { p.gelu_bwd(y.data(), dy.data(), x.data(), n); }, n, trials);
    e_ours = dx_err();
    if (wide ? bool(s.erfc16 && s.exp16) : bool(s.erfc8 && s.exp8)) {
      t_s = best_ns_per_element([&] {
        wide ? gelu16_backward(s.erfc16, s.exp16, y.data(), dy.data(), x.data(), n)
             : gelu8_backward(s.erfc8, s.exp8, y.data(), dy.data(), x.data(), n);
      }, n, trials);
      e_s = dx_err();
    }
    row("GELU backward", p.name, t_ours, e_ours, t_s, e_s);
    // ELU (canonlab: std::expm1, scalar)
    t_s = 0;
    t_ours = best_ns_per_element([&] { p.elu(y.data(), x.data(), n); }, n, trials);
    e_ours = max_rel_err(y, x, ref_elu);
    if (wide ? bool(s.expm116) : bool(s.expm18)) {
      t_s = best_ns_per_element([&] { wide ? elu16(s.expm116, y.data(), x.data(), n) : elu8(s.expm18, y.data(), x.data(), n); }, n, trials);
      e_s = max_rel_err(y, x, ref_elu);
    }
    row("ELU forward, expm1 (canonlab: libm, as before)", p.name, t_ours, e_ours, t_s, e_s);
  }
  return 0;
}
