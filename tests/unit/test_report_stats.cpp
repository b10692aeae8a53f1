// Report statistics against values computed by hand (and, for the t-test, by numerical integration of the
// t density in a separate script): summaries, the exact sign-flip p-value, its Monte-Carlo fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "report/stats.h"

using namespace canonlab::stats;

namespace {

// The user's notes: IPMR in percent for seeds 0,1,2,7,13,21,42,99,100 with key shift at layer 0 (A) and 1 (B).
const std::vector<double> kL0 = {0.7, 13.6, 24.3, 0, 3.8, 11.4, 0, 0, 0.2};
const std::vector<double> kL1 = {0.2, 43.3, 19.9, 0, 2.5, 0, 96.2, 74.1, 99.8};

std::vector<double> zeros(size_t n) { return std::vector<double>(n, 0.0); }

}  // namespace

TEST(Stats, SummaryOfHandComputedValues) {
  // Finite values 0.2, 0.6, 0.5, 0.9: mean 0.55, squared deviations sum to 0.25, std = sqrt(0.25 / 3).
  const std::vector<double> v = {0.2, 0.6, NAN, 0.5, 0.9};
  const Summary s = summarize(v, 0.5);
  EXPECT_EQ(s.n, 4);
  EXPECT_NEAR(s.mean, 0.55, 1e-15);
  EXPECT_NEAR(s.std, std::sqrt(0.25 / 3), 1e-15);
  EXPECT_EQ(s.min, 0.2);
  EXPECT_EQ(s.max, 0.9);
  EXPECT_EQ(s.above, 2);  // 0.5 itself is not strictly above
}

TEST(Stats, SummaryOfOneAndOfNoValue) {
  const std::vector<double> one = {0.7};
  const Summary s1 = summarize(one, 0.5);
  EXPECT_EQ(s1.n, 1);
  EXPECT_EQ(s1.mean, 0.7);
  EXPECT_TRUE(std::isnan(s1.std));  // sample std needs two values
  EXPECT_EQ(s1.above, 1);
  const std::vector<double> none = {NAN};
  const Summary s0 = summarize(none, 0.5);
  EXPECT_EQ(s0.n, 0);
  EXPECT_TRUE(std::isnan(s0.mean));
  EXPECT_TRUE(std::isnan(s0.min));
}

TEST(Stats, PairedComparisonOfTheUsersNineSeeds) {
  // deltas: -0.5, 29.7, -4.4, 0, -1.3, -11.4, 96.2, 74.1, 99.6; sum 282, mean 282/9.
  const PairedComparison c = compare_paired(kL0, kL1);
  EXPECT_EQ(c.n, 9);
  EXPECT_NEAR(c.mean_delta, 282.0 / 9, 1e-9);
  EXPECT_NEAR(c.std_delta, 45.91127312545362, 1e-9);
  EXPECT_EQ(c.wins, 4);
  EXPECT_EQ(c.losses, 4);
  EXPECT_EQ(c.ties, 1);
  // A sign pattern reaches 282 iff the flipped magnitudes sum to <= (317.2 - 282) / 2 = 17.6: any subset of
  // {0.5, 1.3, 4.4, 11.4} (16, the full one exactly on the boundary), times 2 for the zero delta's sign.
  EXPECT_EQ(c.p_value, 32.0 / 512);
  EXPECT_NE(c.test.find("exact"), std::string::npos) << c.test;
  EXPECT_NE(c.test.find("512"), std::string::npos) << c.test;
  // The notes' "p ~ 0.04" is the one-sided paired t-test: t = 2.0474, df = 8.
  EXPECT_NEAR(c.t, 2.0474274312355227, 1e-9);
  EXPECT_NEAR(c.t_p_value, 0.0374031835683561, 1e-7);
}

TEST(Stats, TheSameInFractionsGivesTheSameP) {
  std::vector<double> a, b;
  for (double x : kL0) a.push_back(x / 100);
  for (double x : kL1) b.push_back(x / 100);
  EXPECT_EQ(compare_paired(a, b).p_value, 0.0625);
}

TEST(Stats, OnePair) {
  const std::vector<double> a = {0.1}, b = {0.3};
  const PairedComparison up = compare_paired(a, b);
  EXPECT_EQ(up.n, 1);
  EXPECT_EQ(up.p_value, 0.5);  // +d and -d: only +d reaches the observed sum
  EXPECT_TRUE(std::isnan(up.std_delta));
  EXPECT_TRUE(std::isnan(up.t_p_value));
  EXPECT_EQ(compare_paired(b, a).p_value, 1.0);  // a negative delta: both patterns reach it
}

TEST(Stats, ThreePositiveDeltas) {
  const std::vector<double> b = {1, 2, 3};
  const PairedComparison c = compare_paired(zeros(3), b);
  EXPECT_EQ(c.p_value, 1.0 / 8);  // only the all-plus pattern
  EXPECT_EQ(c.wins, 3);
  // df = 2 has a closed form: P(T >= t) = 1/2 - t / (2 sqrt(t^2 + 2)), t = 2 / (1 / sqrt(3)) = sqrt(12).
  const double t = std::sqrt(12.0);
  EXPECT_NEAR(c.t, t, 1e-12);
  EXPECT_NEAR(c.t_p_value, 0.5 - t / (2 * std::sqrt(t * t + 2)), 1e-12);
}

TEST(Stats, MixedSignsFourPairs) {
  // |d| = {0.5, 0.2, 1, 2}, total 3.7, observed 3.3: flipped magnitudes must sum to <= 0.2: {} and {0.2}.
  const std::vector<double> b = {0.5, -0.2, 1.0, 2.0};
  EXPECT_EQ(compare_paired(zeros(4), b).p_value, 2.0 / 16);
}

TEST(Stats, AllTies) {
  const std::vector<double> a = {0.3, 0.5, 0.9};
  const PairedComparison c = compare_paired(a, a);
  EXPECT_EQ(c.ties, 3);
  EXPECT_EQ(c.wins + c.losses, 0);
  EXPECT_EQ(c.mean_delta, 0);
  EXPECT_EQ(c.std_delta, 0);
  EXPECT_EQ(c.p_value, 1.0);         // every pattern gives 0 >= 0
  EXPECT_TRUE(std::isnan(c.t_p_value));  // t is undefined with zero spread
}

TEST(Stats, PairsWithAMissingValueAreDropped) {
  const std::vector<double> a = {0, NAN, 0}, b = {1, 5, NAN};
  const PairedComparison c = compare_paired(a, b);
  EXPECT_EQ(c.n, 1);
  EXPECT_EQ(c.mean_delta, 1);
  EXPECT_EQ(c.p_value, 0.5);
  const std::vector<double> none = {NAN};
  const PairedComparison empty = compare_paired(none, none);
  EXPECT_EQ(empty.n, 0);
  EXPECT_TRUE(std::isnan(empty.p_value));
}

TEST(Stats, MonteCarloAboveTwentyPairsIsSeededAndClose) {
  std::vector<double> d;
  for (int i = 0; i < 21; i++) d.push_back(std::sin(1.7 * i) + 0.3);  // mixed signs, positive mean
  PairedOptions exact;
  exact.exact_max_n = 21;
  std::string exact_name, mc_name;
  const double p_exact = sign_flip_p(d, exact, &exact_name);
  const double p_mc = sign_flip_p(d, PairedOptions{}, &mc_name);
  EXPECT_NE(exact_name.find("2097152"), std::string::npos) << exact_name;
  EXPECT_NE(mc_name.find("Monte-Carlo"), std::string::npos) << mc_name;
  EXPECT_NEAR(p_mc, p_exact, 0.005);  // 200000 draws: standard error < 0.0012
  EXPECT_EQ(p_mc, sign_flip_p(d, PairedOptions{}, nullptr));  // fixed seed: same answer every time

  // All 25 deltas positive: exact p = 2^-25, so essentially no draw reaches it and p = 1 / (1 + M).
  const std::vector<double> b(25, 1.0);
  const PairedComparison c = compare_paired(zeros(25), b);
  EXPECT_NE(c.test.find("Monte-Carlo"), std::string::npos);
  EXPECT_LE(c.p_value, 2.0 / (1 + 200000));
  EXPECT_GT(c.p_value, 0);
}

TEST(Stats, StudentTTailAndIncompleteBeta) {
  // df = 1 is the Cauchy distribution: P(T >= t) = 1/2 - atan(t) / pi.
  for (double t : {-3.0, -1.0, 0.0, 0.5, 1.0, 10.0})
    EXPECT_NEAR(student_t_sf(t, 1), 0.5 - std::atan(t) / M_PI, 1e-12) << t;
  EXPECT_NEAR(incomplete_beta(1, 1, 0.3), 0.3, 1e-14);
  EXPECT_NEAR(incomplete_beta(2.5, 1, 0.4), std::pow(0.4, 2.5), 1e-13);  // I_x(a, 1) = x^a
  EXPECT_NEAR(incomplete_beta(1, 3, 0.2), 1 - std::pow(0.8, 3), 1e-13);  // I_x(1, b) = 1 - (1-x)^b
  // Large df approaches the normal tail: P(Z >= 1.959964) = 0.025.
  EXPECT_NEAR(student_t_sf(1.959963984540054, 1e6), 0.025, 1e-5);
}
