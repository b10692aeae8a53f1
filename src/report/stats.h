#pragma once
// Statistics for sweep reports: per-group summaries and paired comparisons over seeds.
//
// Seeds are few (often 5-10) and the metrics are far from normal (IPMR is often 0% or ~100% for a seed), so
// the main test is the paired sign-flip permutation test: under "B is no better than A" the sign of each
// per-seed difference is as likely + as -, and the p-value is the fraction of the 2^n sign patterns whose sum
// is at least the observed sum. It is exact for n <= 20 (full enumeration) and a fixed-seed Monte-Carlo
// estimate above that. A one-sided paired t-test is reported beside it for readers who expect one.
#include <cstdint>
#include <span>
#include <string>

namespace canonlab::stats {

struct Summary {
  int n = 0;              // finite values only
  double mean = 0;        // NaN when n == 0
  double std = 0;         // sample standard deviation (n-1); NaN when n < 2
  double min = 0, max = 0;  // NaN when n == 0
  int above = 0;          // values strictly above the threshold
};
Summary summarize(std::span<const double> values, double threshold);

struct PairedComparison {
  int n = 0;                   // pairs (both values finite)
  double mean_delta = 0;       // mean of delta_i = b_i - a_i; NaN when n == 0
  double std_delta = 0;        // sample std of delta (n-1); NaN when n < 2
  int wins = 0, losses = 0, ties = 0;  // b > a, b < a, b == a
  double p_value = 0;          // one-sided, for "B > A"; NaN when n == 0
  std::string test;            // which test gave p_value, for the report to print
  double t = 0, t_p_value = 0; // one-sided paired t-test; NaN when n < 2 or std_delta == 0
};

struct PairedOptions {
  int exact_max_n = 20;              // enumerate all 2^n sign patterns up to this many pairs
  int64_t monte_carlo_draws = 200000;  // random sign patterns above it
  uint64_t seed = 0x5167F11B;        // fixed, so a report is reproducible
};

// a[i] and b[i] belong to the same seed; pairs where either is NaN are dropped.
PairedComparison compare_paired(std::span<const double> a, std::span<const double> b, const PairedOptions& opt = {});

// One-sided sign-flip p-value for "mean of deltas > 0" (see the top of this file). `test` receives its name.
double sign_flip_p(std::span<const double> deltas, const PairedOptions& opt, std::string* test);

// P(T >= t) for Student's t with `df` degrees of freedom.
double student_t_sf(double t, double df);
// The regularized incomplete beta function I_x(a, b).
double incomplete_beta(double a, double b, double x);

}  // namespace canonlab::stats
