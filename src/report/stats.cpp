#include "report/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/rng.h"

namespace canonlab::stats {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double sample_std(std::span<const double> v, double mean) {
  if (v.size() < 2) return kNaN;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / double(v.size() - 1));
}

double mean_of(std::span<const double> v) {
  if (v.empty()) return kNaN;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

}  // namespace

Summary summarize(std::span<const double> values, double threshold) {
  std::vector<double> v;
  for (double x : values)
    if (std::isfinite(x)) v.push_back(x);
  Summary s;
  s.n = int(v.size());
  s.mean = mean_of(v);
  s.std = sample_std(v, s.mean);
  s.min = v.empty() ? kNaN : *std::min_element(v.begin(), v.end());
  s.max = v.empty() ? kNaN : *std::max_element(v.begin(), v.end());
  s.above = int(std::count_if(v.begin(), v.end(), [&](double x) { return x > threshold; }));
  return s;
}

double sign_flip_p(std::span<const double> deltas, const PairedOptions& opt, std::string* test) {
  const int n = int(deltas.size());
  if (n == 0) {
    if (test) *test = "no pairs";
    return kNaN;
  }
  double observed = 0, total = 0;
  for (double d : deltas) observed += d, total += std::abs(d);
  // Sums of the same magnitudes in a different order differ in the last bits; a pattern that ties the
  // observed sum exactly (e.g. every sign as observed, or a zero delta flipped) must count as "at least".
  const double tolerance = 1e-9 * total;
  // Flipping the signs in `mask` turns sum_i |d_i| into total - 2 * sum_{i in mask} |d_i|.
  auto at_least_observed = [&](auto&& flipped) { return total - 2 * flipped >= observed - tolerance; };

  if (n <= opt.exact_max_n) {
    const uint64_t patterns = uint64_t(1) << n;
    uint64_t count = 0;
    for (uint64_t mask = 0; mask < patterns; mask++) {
      double flipped = 0;
      for (int i = 0; i < n; i++)
        if (mask >> i & 1) flipped += std::abs(deltas[i]);
      count += at_least_observed(flipped);
    }
    if (test)
      *test = "exact paired sign-flip (all 2^" + std::to_string(n) + " = " + std::to_string(patterns) +
              " sign patterns)";
    return double(count) / double(patterns);
  }
  // Too many patterns to enumerate: draw them. (1 + count) / (1 + M) counts the observed pattern itself, so
  // the estimate is never 0 and the test stays valid.
  CounterRng rng(opt.seed, uint64_t(n));
  uint64_t count = 0;
  for (int64_t draw = 0; draw < opt.monte_carlo_draws; draw++) {
    double flipped = 0;
    uint64_t bits = 0;
    for (int i = 0; i < n; i++) {
      if (i % 64 == 0) bits = rng.next_u64();
      if (bits >> (i % 64) & 1) flipped += std::abs(deltas[i]);
    }
    count += at_least_observed(flipped);
  }
  if (test)
    *test = "Monte-Carlo paired sign-flip (" + std::to_string(opt.monte_carlo_draws) +
            " random sign patterns, fixed seed)";
  return double(1 + count) / double(1 + opt.monte_carlo_draws);
}

PairedComparison compare_paired(std::span<const double> a, std::span<const double> b, const PairedOptions& opt) {
  std::vector<double> deltas;
  PairedComparison r;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) continue;
    const double d = b[i] - a[i];
    deltas.push_back(d);
    r.wins += d > 0;
    r.losses += d < 0;
    r.ties += d == 0;
  }
  r.n = int(deltas.size());
  r.mean_delta = mean_of(deltas);
  r.std_delta = sample_std(deltas, r.mean_delta);
  r.p_value = sign_flip_p(deltas, opt, &r.test);
  if (r.n >= 2 && r.std_delta > 0) {
    r.t = r.mean_delta / (r.std_delta / std::sqrt(double(r.n)));
    r.t_p_value = student_t_sf(r.t, r.n - 1);
  } else {
    r.t = r.t_p_value = kNaN;
  }
  return r;
}

namespace {
// Continued fraction for I_x(a, b) by the modified Lentz method (Numerical Recipes 6.4); converges fast for
// x < (a + 1) / (a + b + 2), which the caller arranges by symmetry.
double beta_continued_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300, eps = 1e-15;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::abs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 300; m++) {
    const int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < eps) break;
  }
  return h;
}
}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (!(x > 0)) return 0;
  if (!(x < 1)) return 1;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  const double front = std::exp(log_front);
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1 - front * beta_continued_fraction(b, a, 1 - x) / b;
}

double student_t_sf(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return kNaN;
  if (std::isinf(t)) return t > 0 ? 0 : 1;
  // P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2); half of it is the tail on t's side.
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));
  return t > 0 ? tail : 1 - tail;
}

}  // namespace canonlab::stats
