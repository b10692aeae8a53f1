// canon_conv: fast against naive in float for depthwise, grouped and dense, several K (including K > the
// stack tap tile) and Tn (including Tn < K and more than one time chunk); finite differences in double; a
// hand-computed depthwise case; dweight independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <ostream>
#include <vector>

#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/canon_conv/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct ConvCase {
  int B, Tn, C, K, G;
};
std::ostream& operator<<(std::ostream& os, const ConvCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K << " G=" << c.G;
}

class OpsCanonConvFastVsNaive : public ::testing::TestWithParam<ConvCase> {};

TEST_P(OpsCanonConvFastVsNaive, MatchesInFloat) {
  const auto p = GetParam();
  const size_t n = (size_t)p.B * p.Tn * p.C, nw = (size_t)p.C * (p.C / p.G) * p.K;
  auto in = random_vector<float>(n, 1), w = random_vector<float>(nw, 2), dout = random_vector<float>(n, 3);
  std::vector<float> out1(n, 9.f), out2(n, 9.f), din1(n, 9.f), din2(n, 9.f);
  auto dw1 = random_vector<float>(nw, 4), dw2 = dw1;
  canon_conv_forward(out1.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.G);
  canon_conv_forward_naive(out2.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.G);
  // each output sums (C/G)·K float products: allow float rounding that grows with that count
  const double atol = 1e-6 * std::max(1.0, (p.C / p.G) * p.K / 8.0);
  auto c = compare(out1.data(), out2.data(), n, 1e-5, atol);
  EXPECT_TRUE(c.ok) << "out " << c.message;
  canon_conv_backward(din1.data(), dw1.data(), dout.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.G);
  canon_conv_backward_naive(din2.data(), dw2.data(), dout.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.G);
  c = compare(din1.data(), din2.data(), n, 1e-5, atol);
  EXPECT_TRUE(c.ok) << "din " << c.message;
  // dweight sums B·Tn products; the fast path sums each sequence in float, like a BLAS reduction would
  c = compare(dw1.data(), dw2.data(), nw, 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "dweight " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsCanonConvFastVsNaive,
                         ::testing::Values(
                             // depthwise (G == C), the Canon case; C = 80 leaves a partial 64-channel tile
                             ConvCase{2, 37, 16, 4, 16}, ConvCase{3, 70, 80, 4, 80}, ConvCase{2, 3, 8, 4, 8},
                             ConvCase{2, 1, 8, 2, 8}, ConvCase{2, 37, 16, 1, 16}, ConvCase{2, 37, 16, 2, 16},
                             ConvCase{2, 130, 24, 5, 24}, ConvCase{1, 20, 8, 9, 8},
                             // grouped (G = C/4) and dense (G = 1)
                             ConvCase{2, 37, 16, 4, 4}, ConvCase{2, 37, 16, 1, 4}, ConvCase{2, 70, 16, 2, 4},
                             ConvCase{2, 37, 12, 4, 1}, ConvCase{2, 37, 12, 1, 1}, ConvCase{1, 20, 40, 5, 1},
                             ConvCase{2, 3, 8, 4, 2},
                             // groups wider than the 16/32-channel weight tiles
                             ConvCase{2, 70, 80, 4, 2}, ConvCase{1, 9, 64, 4, 1}));

TEST(OpsCanonConv, DepthwiseHandComputed) {
  // C = 1, K = 3, weight (w0, w1, w2): out[t] = w0 in[t−2] + w1 in[t−1] + w2 in[t]
  const float in[4] = {1, 2, 3, 4}, w[3] = {0.5f, -1.f, 2.f};
  float out[4];
  canon_conv_forward(out, in, w, 1, 4, 1, 3, 1);
  EXPECT_FLOAT_EQ(out[0], 2.f);
  EXPECT_FLOAT_EQ(out[1], -1.f + 4.f);
  EXPECT_FLOAT_EQ(out[2], 0.5f - 2.f + 6.f);
  EXPECT_FLOAT_EQ(out[3], 1.f - 3.f + 8.f);
  // din[s] = Σ_i w[i] dout[s + 2 − i]; dweight[i] = Σ_t dout[t] in[t − 2 + i]
  const float dout[4] = {1, 0, 0, 1};
  float din[4], dw[3] = {0, 0, 0};
  canon_conv_backward(din, dw, dout, in, w, 1, 4, 1, 3, 1);
  EXPECT_FLOAT_EQ(din[0], 2.f);
  EXPECT_FLOAT_EQ(din[1], 0.5f);
  EXPECT_FLOAT_EQ(din[2], -1.f);
  EXPECT_FLOAT_EQ(din[3], 2.f);
  EXPECT_FLOAT_EQ(dw[0], 2.f);
  EXPECT_FLOAT_EQ(dw[1], 3.f);
  EXPECT_FLOAT_EQ(dw[2], 1.f + 4.f);
}

// Decoding token by token through the sliding window reproduces the sequence forward, grouped and depthwise.
TEST(OpsCanonConv, StepByStepMatchesForward) {
  for (int G : {1, 2, 6}) {
    const int Tn = 7, C = 6, K = 3;
    std::vector<double> in = random_vector<double>(size_t(Tn) * C, 21), w = random_vector<double>(size_t(C) * (C / G) * K, 22);
    std::vector<double> want(in.size()), got(in.size()), window(size_t(K) * C, 0.0);
    canon_conv_forward_naive(want.data(), in.data(), w.data(), 1, Tn, C, K, G);
    for (int t = 0; t < Tn; t++) canon_conv_step(got.data() + size_t(t) * C, window.data(), in.data() + size_t(t) * C, w.data(), C, K, G);
    auto c = compare(got.data(), want.data(), got.size(), 1e-13, 1e-15);
    EXPECT_TRUE(c.ok) << "G=" << G << ": " << c.message;
  }
}

TEST(OpsCanonConv, RejectsGroupsThatDoNotDivideChannels) {
  std::vector<float> x(2 * 6), w(6 * 6 * 2);
  EXPECT_THROW(canon_conv_forward(x.data(), x.data(), w.data(), 1, 2, 6, 2, 4), Error);
  EXPECT_THROW(canon_conv_backward(x.data(), w.data(), x.data(), x.data(), w.data(), 1, 2, 6, 2, 0), Error);
}

TEST(OpsCanonConv, DweightDoesNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (int G : {48, 12, 1}) {
    const int B = 3, Tn = 50, C = 48, K = 4;
    const size_t n = (size_t)B * Tn * C, nw = (size_t)C * (C / G) * K;
    auto in = random_vector<float>(n, 1), dout = random_vector<float>(n, 2), w = random_vector<float>(nw, 3);
    std::vector<std::vector<float>> dws;
    std::vector<float> din(n);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> dw(nw, 0.f);
      canon_conv_backward(din.data(), dw.data(), dout.data(), in.data(), w.data(), B, Tn, C, K, G);
      dws.push_back(dw);
    }
    EXPECT_EQ(dws[0], dws[1]) << "G = " << G;
    EXPECT_EQ(dws[0], dws[2]) << "G = " << G;
  }
  omp_set_num_threads(saved);
}

template <bool Fast>
void gradcheck_conv(int B, int Tn, int C, int K, int G) {
  const size_t n = (size_t)B * Tn * C, nw = (size_t)C * (C / G) * K;
  auto in = random_vector(n, 41), w = random_vector(nw, 42), r = random_vector(n, 43);
  std::vector<double> out(n);
  auto loss = [&] {
    if (Fast)
      canon_conv_forward(out.data(), in.data(), w.data(), B, Tn, C, K, G);
    else
      canon_conv_forward_naive(out.data(), in.data(), w.data(), B, Tn, C, K, G);
    return test::dot(out, r);
  };
  std::vector<double> din(n), dw(nw, 0.0);
  if (Fast)
    canon_conv_backward(din.data(), dw.data(), r.data(), in.data(), w.data(), B, Tn, C, K, G);
  else
    canon_conv_backward_naive(din.data(), dw.data(), r.data(), in.data(), w.data(), B, Tn, C, K, G);
  // The fast path is already pinned to naive in float; a sample keeps its many threaded calls cheap.
  test::GradcheckOptions opt;
  opt.max_points = Fast ? 40 : 0;
  auto g = test::gradcheck(loss, in.data(), n, din.data(), opt);
  EXPECT_TRUE(g.ok) << "din (C " << C << " K " << K << " G " << G << ") " << g.message;
  g = test::gradcheck(loss, w.data(), nw, dw.data(), opt);
  EXPECT_TRUE(g.ok) << "dweight (C " << C << " K " << K << " G " << G << ") " << g.message;
}

TEST(OpsCanonConv, GradcheckNaive) {
  for (int K : {1, 2, 4}) {
    gradcheck_conv<false>(2, 6, 8, K, 8);
    gradcheck_conv<false>(2, 6, 8, K, 2);
    gradcheck_conv<false>(2, 6, 8, K, 1);
  }
}
TEST(OpsCanonConv, GradcheckFast) {
  for (int K : {1, 2, 4}) {
    gradcheck_conv<true>(2, 6, 8, K, 8);
    gradcheck_conv<true>(2, 6, 8, K, 2);
    gradcheck_conv<true>(2, 6, 8, K, 1);
  }
  gradcheck_conv<true>(1, 5, 4, 6, 4);  // K past the 4-tap stack tile
}

}  // namespace
}  // namespace canonlab
