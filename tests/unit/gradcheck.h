#pragma once
// Finite-difference gradient check in double (namespace canonlab::test).
//
//   std::vector<double> x = ..., dx = ...;               // inputs and the analytic gradient of loss at x
//   auto loss = [&] { return some_scalar_of(x); };      // must read x afresh on every call
//   test::GradcheckResult r = test::gradcheck(loss, x.data(), x.size(), dx.data());
//   EXPECT_TRUE(r.ok) << r.message;
//
// Options (GradcheckOptions): eps (1e-6), rtol (1e-5), atol (1e-7), max_points (0 = every index).
//
// Each x[i] is nudged by ±eps in place (and restored) and the central difference
// (loss(x + eps) − loss(x − eps)) / 2eps is compared with analytic[i]. An index passes when
// |analytic − numeric| <= atol + rtol · max(|analytic|, |numeric|). The result names the worst index
// (largest error relative to its tolerance), pass or fail.
//
// The finite differences run on one OpenMP thread (the caller's thread count is restored after): each index costs
// two forwards of a tiny double model, thousands of parallel regions whose barriers cost more than their work, and
// under ctest -j2 beside another busy test they ran up to 65x slower (hybrid_MGDN: 295 s instead of 4.5). The
// forward gives the same bits at every thread count (the ops' ...DoNotDependOnThreadCount tests), and the analytic
// gradient the caller passes in is still computed at the caller's thread count.
//
// To check a function y = f(x) with many outputs, make the loss a fixed random projection
// loss = Σ y ⊙ r (random_vector / dot below); its gradient with respect to y is r, which is what you feed
// to the backward being tested as dy.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

namespace canonlab::test {

// Sets the OpenMP thread count for a scope and restores the previous one.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

struct GradcheckOptions {
  double eps = 1e-6;
  double rtol = 1e-5;
  double atol = 1e-7;
  // Check at most this many distinct indices (0 = all), visited as i_k = k·P mod n with a prime P that does not
  // divide n: deterministic, and unlike a plain stride it does not skip whole channels or heads.
  size_t max_points = 0;
};

struct GradcheckResult {
  bool ok = true;
  size_t worst_index = 0;
  double analytic = 0, numeric = 0;  // at worst_index
  double worst_ratio = 0;            // |analytic − numeric| / tolerance at worst_index; > 1 fails
  size_t checked = 0;
  std::string message;  // one line describing worst_index, for EXPECT_TRUE(r.ok) << r.message
};

inline GradcheckResult gradcheck(const std::function<double()>& loss, double* x, size_t n, const double* analytic,
                                 const GradcheckOptions& opt = {}) {
  GradcheckResult r;
  const bool sample = opt.max_points != 0 && opt.max_points < n;
  size_t prime = 1;
  if (sample)
    for (size_t p : {7919u, 104729u, 1299709u, 15485863u})
      if (n % p != 0) {
        prime = p;
        break;
      }
  const size_t count = sample ? opt.max_points : n;
  const ScopedOmpThreads one_thread(1);
  for (size_t k = 0; k < count; k++) {
    const size_t i = sample ? (k * prime) % n : k;
    const double saved = x[i];
    x[i] = saved + opt.eps;
    const double lp = loss();
    x[i] = saved - opt.eps;
    const double lm = loss();
    x[i] = saved;
    const double numeric = (lp - lm) / (2 * opt.eps);
    const double err = std::abs(analytic[i] - numeric);
    const double tol = opt.atol + opt.rtol * std::max(std::abs(analytic[i]), std::abs(numeric));
    // a NaN on either side counts as an infinitely bad index
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (r.checked == 0 || ratio > r.worst_ratio) {
      r.worst_index = i;
      r.analytic = analytic[i];
      r.numeric = numeric;
      r.worst_ratio = ratio;
    }
    if (!(ratio <= 1)) r.ok = false;
    r.checked++;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "gradcheck %s: worst index %zu of %zu: analytic %.10g, numeric %.10g (error %.3g x tolerance, "
                "%zu checked)",
                r.ok ? "passed" : "FAILED", r.worst_index, n, r.analytic, r.numeric, r.worst_ratio, r.checked);
  r.message = buf;
  return r;
}

// ---- small helpers that gradient tests keep needing ----

// n values uniform in [lo, hi) from a fixed seed, for inputs and loss projections.
template <class T = double>
std::vector<T> random_vector(size_t n, unsigned seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& e : v) e = T(dist(gen));
  return v;
}

// Element-wise comparison of got against want with the same tolerance rule as gradcheck:
// |got − want| <= atol + rtol · |want|. Reports the worst index, e.g. to compare a fast kernel with its naive
// reference:  auto c = compare(y_fast.data(), y_naive.data(), n, 1e-5, 1e-6);  EXPECT_TRUE(c.ok) << c.message;
struct CompareResult {
  bool ok = true;
  size_t worst_index = 0;
  double got = 0, want = 0, worst_ratio = 0;
  std::string message;
};

template <class A, class B>
CompareResult compare(const A* got, const B* want, size_t n, double rtol, double atol) {
  CompareResult r;
  for (size_t i = 0; i < n; i++) {
    const double g = double(got[i]), w = double(want[i]);
    const double err = std::abs(g - w);
    const double ratio = std::isnan(err) ? INFINITY : err / (atol + rtol * std::abs(w));
    if (i == 0 || ratio > r.worst_ratio) {
      r.worst_index = i;
      r.got = g;
      r.want = w;
      r.worst_ratio = ratio;
    }
    if (!(ratio <= 1)) r.ok = false;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "compare %s: worst index %zu of %zu: got %.10g, want %.10g (error %.3g x tolerance)",
                r.ok ? "passed" : "FAILED", r.worst_index, n, r.got, r.want, r.worst_ratio);
  r.message = buf;
  return r;
}

inline double dot(const double* a, const double* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return dot(a.data(), b.data(), std::min(a.size(), b.size()));
}

}  // namespace canonlab::test
