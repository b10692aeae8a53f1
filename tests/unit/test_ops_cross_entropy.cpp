// cross entropy: hand-computed values, finite differences, large logits, bad targets.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/ops/cross_entropy/cross_entropy.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

TEST(OpsCrossEntropy, HandComputed) {
  // row 0: logits (1, 2, 3), target 2: loss = log(e + e² + e³) − 3; softmax = (0.0900…, 0.2447…, 0.6652…)
  // row 1: logits (0.5, −1, 2, 0), target 0
  const float logits[7] = {1, 2, 3, 0.5f, -1, 2, 0};
  // two rows of different length do not fit one (N, V) call, so each row is its own call
  const int t0 = 2, t1 = 0;
  float loss0, loss1;
  cross_entropy_forward(&loss0, logits, &t0, 1, 3);
  cross_entropy_forward(&loss1, logits + 3, &t1, 1, 4);
  EXPECT_NEAR(loss0, 0.40760596444438013, 1e-6);
  EXPECT_NEAR(loss1, 1.8423495823898222, 1e-6);
  float d0[3], d1[4];
  const float two = 2.f, half = 0.5f;
  cross_entropy_backward(d0, logits, &t0, &two, 1, 3);
  cross_entropy_backward(d1, logits + 3, &t1, &half, 1, 4);
  EXPECT_NEAR(d0[0], 2 * 0.09003057317038046, 1e-6);
  EXPECT_NEAR(d0[1], 2 * 0.24472847105479767, 1e-6);
  EXPECT_NEAR(d0[2], 2 * (0.6652409557748219 - 1), 1e-6);
  EXPECT_NEAR(d1[0], 0.5 * (0.15844470951497971 - 1), 1e-6);
  EXPECT_NEAR(d1[1], 0.5 * 0.03535379340874887, 1e-6);
  EXPECT_NEAR(d1[2], 0.5 * 0.7100999228861742, 1e-6);
  EXPECT_NEAR(d1[3], 0.5 * 0.09610157419009721, 1e-6);
}

TEST(OpsCrossEntropy, GradcheckAndRowsIndependent) {
  const int N = 6, V = 11;
  auto logits = test::random_vector((size_t)N * V, 1, -3, 3), dl = test::random_vector(N, 2);
  std::vector<int> targets = {0, 10, 3, 3, 7, 1};
  std::vector<double> losses(N);
  auto loss = [&] {
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    return test::dot(losses, dl);
  };
  std::vector<double> dlogits((size_t)N * V);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dl.data(), N, V);
  auto g = test::gradcheck(loss, logits.data(), logits.size(), dlogits.data());
  EXPECT_TRUE(g.ok) << g.message;
  // each row of dlogits sums to zero: softmax sums to one, minus the one-hot
  for (int n = 0; n < N; n++) {
    double s = 0;
    for (int v = 0; v < V; v++) s += dlogits[n * V + v];
    EXPECT_NEAR(s, 0, 1e-14);
  }
}

TEST(OpsCrossEntropy, ThreadedRowsMatchTheFormula) {
  const int N = 40, V = 1001;  // big enough for the threaded loop
  auto logits = test::random_vector<float>((size_t)N * V, 3, -5, 5);
  std::vector<int> targets(N);
  for (int n = 0; n < N; n++) targets[n] = (n * 37) % V;
  std::vector<float> losses(N), dl(N, 1.f), d((size_t)N * V);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
  cross_entropy_backward(d.data(), logits.data(), targets.data(), dl.data(), N, V);
  for (int n = 0; n < N; n++) {
    double z = 0;
    for (int v = 0; v < V; v++) z += std::exp(double(logits[(size_t)n * V + v]));
    EXPECT_NEAR(losses[n], std::log(z) - logits[(size_t)n * V + targets[n]], 1e-5);
    for (int v = 0; v < V; v += 97)
      EXPECT_NEAR(d[(size_t)n * V + v], std::exp(double(logits[(size_t)n * V + v])) / z - (v == targets[n]), 1e-7);
  }
}

TEST(OpsCrossEntropy, LargeLogitsStayFinite) {
  const float logits[3] = {1000.f, 1001.f, -1000.f};
  const int t = 0;
  float loss, d[3];
  const float one = 1.f;
  cross_entropy_forward(&loss, logits, &t, 1, 3);
  cross_entropy_backward(d, logits, &t, &one, 1, 3);
  EXPECT_NEAR(loss, std::log(1 + std::exp(1.0)), 1e-5);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(d[2], 0.f, 1e-30);
}

TEST(OpsCrossEntropy, RejectsTargetOutsideVocabulary) {
  const float logits[3] = {0, 0, 0};
  float loss;
  const int bad = 3, neg = -1;
  EXPECT_THROW(cross_entropy_forward(&loss, logits, &bad, 1, 3), Error);
  EXPECT_THROW(cross_entropy_forward(&loss, logits, &neg, 1, 3), Error);
}

}  // namespace
}  // namespace canonlab
