// rmsnorm / layernorm: fast against naive in float (with and without scale/bias), finite differences in double
// for both, and dw/db independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops/norm/fast.h"
#include "engine/ops/norm/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct NormCase {
  int N, C;
  bool scale, bias;
};
std::ostream& operator<<(std::ostream& os, const NormCase& c) {
  return os << "N=" << c.N << " C=" << c.C << " scale=" << c.scale << " bias=" << c.bias;
}

class OpsNormFastVsNaive : public ::testing::TestWithParam<NormCase> {};

TEST_P(OpsNormFastVsNaive, RmsnormMatchesInFloat) {
  const auto p = GetParam();
  const size_t n = (size_t)p.N * p.C;
  // an offset mean makes the norm's scale matter
  auto x = random_vector<float>(n, 1, -1, 2), w = random_vector<float>(p.C, 2, 0.5, 1.5);
  auto dy = random_vector<float>(n, 3);
  const float* wp = p.scale ? w.data() : nullptr;
  std::vector<float> y1(n), y2(n), r1(p.N), r2(p.N), dx1(n), dx2(n);
  auto dw1 = random_vector<float>(p.C, 4), dw2 = dw1;
  rmsnorm_forward(y1.data(), r1.data(), x.data(), wp, p.N, p.C, 1e-5f);
  rmsnorm_forward_naive(y2.data(), r2.data(), x.data(), wp, p.N, p.C, 1e-5f);
  auto c = compare(y1.data(), y2.data(), n, 1e-5, 1e-6);
  EXPECT_TRUE(c.ok) << "y " << c.message;
  c = compare(r1.data(), r2.data(), p.N, 1e-6, 0);
  EXPECT_TRUE(c.ok) << "rstd " << c.message;
  rmsnorm_backward(dx1.data(), dw1.data(), dy.data(), x.data(), wp, r2.data(), p.N, p.C);
  rmsnorm_backward_naive(dx2.data(), dw2.data(), dy.data(), x.data(), wp, r2.data(), p.N, p.C);
  c = compare(dx1.data(), dx2.data(), n, 1e-4, 1e-5);
  EXPECT_TRUE(c.ok) << "dx " << c.message;
  c = compare(dw1.data(), dw2.data(), p.C, 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "dw " << c.message;
}

TEST_P(OpsNormFastVsNaive, LayernormMatchesInFloat) {
  const auto p = GetParam();
  const size_t n = (size_t)p.N * p.C;
  auto x = random_vector<float>(n, 5, -1, 2), w = random_vector<float>(p.C, 6, 0.5, 1.5);
  auto b = random_vector<float>(p.C, 7), dy = random_vector<float>(n, 8);
  const float* wp = p.scale ? w.data() : nullptr;
  const float* bp = p.bias ? b.data() : nullptr;
  std::vector<float> y1(n), y2(n), m1(p.N), m2(p.N), r1(p.N), r2(p.N), dx1(n), dx2(n);
  auto dw1 = random_vector<float>(p.C, 9), dw2 = dw1, db1 = random_vector<float>(p.C, 10), db2 = db1;
  layernorm_forward(y1.data(), m1.data(), r1.data(), x.data(), wp, bp, p.N, p.C, 1e-5f);
  layernorm_forward_naive(y2.data(), m2.data(), r2.data(), x.data(), wp, bp, p.N, p.C, 1e-5f);
  auto c = compare(y1.data(), y2.data(), n, 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "y " << c.message;
  c = compare(m1.data(), m2.data(), p.N, 1e-6, 1e-7);
  EXPECT_TRUE(c.ok) << "mean " << c.message;
  c = compare(r1.data(), r2.data(), p.N, 1e-6, 0);
  EXPECT_TRUE(c.ok) << "rstd " << c.message;
  float* dbf = p.bias ? db1.data() : nullptr;
  float* dbn = p.bias ? db2.data() : nullptr;
  layernorm_backward(dx1.data(), dw1.data(), dbf, dy.data(), x.data(), wp, m2.data(), r2.data(), p.N, p.C);
  layernorm_backward_naive(dx2.data(), dw2.data(), dbn, dy.data(), x.data(), wp, m2.data(), r2.data(), p.N, p.C);
  c = compare(dx1.data(), dx2.data(), n, 1e-4, 1e-5);
  EXPECT_TRUE(c.ok) << "dx " << c.message;
  c = compare(dw1.data(), dw2.data(), p.C, 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "dw " << c.message;
  c = compare(db1.data(), db2.data(), p.C, 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "db " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsNormFastVsNaive,
                         ::testing::Values(NormCase{1, 1, true, true}, NormCase{7, 13, true, true},
                                           NormCase{50, 37, false, false}, NormCase{50, 37, true, false},
                                           NormCase{33, 128, false, true}, NormCase{300, 130, true, true}));

TEST(OpsNorm, NullScaleLeavesDwUntouched) {
  const int N = 5, C = 6;
  auto x = random_vector<float>(N * C, 1), dy = random_vector<float>(N * C, 2);
  std::vector<float> y(N * C), m(N), r(N), dx(N * C), dw(C, 3.f), db(C, 0.f);
  rmsnorm_forward(y.data(), r.data(), x.data(), (const float*)nullptr, N, C, 1e-5f);
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), (const float*)nullptr, r.data(), N, C);
  for (float v : dw) EXPECT_EQ(v, 3.f);
  layernorm_forward(y.data(), m.data(), r.data(), x.data(), (const float*)nullptr, (const float*)nullptr, N, C, 1e-5f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), (const float*)nullptr, m.data(), r.data(), N,
                     C);
  for (float v : dw) EXPECT_EQ(v, 3.f);
  // db still receives the bias gradient: Σ_n dy
  for (int c = 0; c < C; c++) {
    double s = 0;
    for (int n = 0; n < N; n++) s += dy[n * C + c];
    EXPECT_NEAR(db[c], s, 1e-5);
  }
}

TEST(OpsNorm, ParameterGradientsDoNotDependOnThreadCount) {
  const int N = 257, C = 80;
  auto x = random_vector<float>(N * C, 1), dy = random_vector<float>(N * C, 2), w = random_vector<float>(C, 3);
  std::vector<float> y(N * C), m(N), r(N), dx(N * C);
  layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), w.data(), N, C, 1e-5f);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> dws, dbs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dw(C, 0.f), db(C, 0.f);
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
    dws.push_back(dw);
    dbs.push_back(db);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(dws[0], dws[1]);
  EXPECT_EQ(dws[0], dws[2]);
  EXPECT_EQ(dbs[0], dbs[1]);
  EXPECT_EQ(dbs[0], dbs[2]);
}

// The residual add fused into RMSNorm (a block's x_mid = x + y, then mlp_norm; and the backward's dx = norm'(dy) +
// dres) gives the same bits as the two ops in turn, at any thread count, in place (sum aliasing a) or not.
TEST(OpsNorm, ResidualAddFusedIntoRmsnormGivesTheBitsOfTheTwoOps) {
  const int saved = omp_get_max_threads();
  for (const auto [N, C] : {std::pair{257, 80}, std::pair{64, 128}, std::pair{5, 19}}) {
    const size_t n = size_t(N) * C;
    auto a = random_vector<float>(n, 31, -1, 2), b = random_vector<float>(n, 32), w = random_vector<float>(C, 33);
    auto dy = random_vector<float>(n, 34), dres = random_vector<float>(n, 35);
    // the two ops
    std::vector<float> sum(n), y(n), rstd(N), dx(n), dw(C, 0.25f);
    for (size_t i = 0; i < n; i++) sum[i] = a[i] + b[i];
    rmsnorm_forward(y.data(), rstd.data(), sum.data(), w.data(), N, C, 1e-5f);
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), sum.data(), w.data(), rstd.data(), N, C);
    for (size_t i = 0; i < n; i++) dx[i] += dres[i];
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      for (bool in_place : {false, true}) {
        std::vector<float> s2 = in_place ? a : std::vector<float>(n), y2(n), r2(N), dx2(n), dw2(C, 0.25f);
        add_rmsnorm_forward(s2.data(), y2.data(), r2.data(), in_place ? s2.data() : a.data(), b.data(), w.data(), N, C,
                            1e-5f);
        rmsnorm_backward(dx2.data(), dw2.data(), dy.data(), s2.data(), w.data(), r2.data(), N, C, dres.data());
        const std::string at = "N=" + std::to_string(N) + " C=" + std::to_string(C) + " threads=" +
                               std::to_string(threads) + (in_place ? " in place" : "");
        EXPECT_EQ(s2, sum) << at;
        EXPECT_EQ(y2, y) << at;
        EXPECT_EQ(r2, rstd) << at;
        EXPECT_EQ(dx2, dx) << at;
        EXPECT_EQ(dw2, dw) << at;
      }
    }
  }
  omp_set_num_threads(saved);
}

template <bool Fast>
void gradcheck_norms(bool scale) {
  const int N = 4, C = 9;
  auto x = random_vector((size_t)N * C, 21, -1, 2), w = random_vector(C, 22, 0.5, 1.5), b = random_vector(C, 23);
  auto r = random_vector((size_t)N * C, 24);
  std::vector<double> y((size_t)N * C), mean(N), rstd(N);
  const double* wp = scale ? w.data() : nullptr;
  // The fast path is already pinned to naive in float; a sample keeps its many threaded calls cheap.
  test::GradcheckOptions opt;
  opt.max_points = Fast ? 20 : 0;
  {
    auto loss = [&] {
      if (Fast)
        rmsnorm_forward(y.data(), rstd.data(), x.data(), wp, N, C, 1e-5);
      else
        rmsnorm_forward_naive(y.data(), rstd.data(), x.data(), wp, N, C, 1e-5);
      return test::dot(y, r);
    };
    loss();
    std::vector<double> dx((size_t)N * C), dw(C, 0.0);
    if (Fast)
      rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), wp, rstd.data(), N, C);
    else
      rmsnorm_backward_naive(dx.data(), dw.data(), r.data(), x.data(), wp, rstd.data(), N, C);
    auto g = test::gradcheck(loss, x.data(), x.size(), dx.data(), opt);
    EXPECT_TRUE(g.ok) << "rmsnorm dx " << g.message;
    if (scale) {
      g = test::gradcheck(loss, w.data(), w.size(), dw.data(), opt);
      EXPECT_TRUE(g.ok) << "rmsnorm dw " << g.message;
    }
  }
  {
    auto loss = [&] {
      if (Fast)
        layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), wp, b.data(), N, C, 1e-5);
      else
        layernorm_forward_naive(y.data(), mean.data(), rstd.data(), x.data(), wp, b.data(), N, C, 1e-5);
      return test::dot(y, r);
    };
    loss();
    std::vector<double> dx((size_t)N * C), dw(C, 0.0), db(C, 0.0);
    if (Fast)
      layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), wp, mean.data(), rstd.data(), N, C);
    else
      layernorm_backward_naive(dx.data(), dw.data(), db.data(), r.data(), x.data(), wp, mean.data(), rstd.data(), N, C);
    auto g = test::gradcheck(loss, x.data(), x.size(), dx.data(), opt);
    EXPECT_TRUE(g.ok) << "layernorm dx " << g.message;
    if (scale) {
      g = test::gradcheck(loss, w.data(), w.size(), dw.data(), opt);
      EXPECT_TRUE(g.ok) << "layernorm dw " << g.message;
    }
    g = test::gradcheck(loss, b.data(), b.size(), db.data(), opt);
    EXPECT_TRUE(g.ok) << "layernorm db " << g.message;
  }
}

TEST(OpsNorm, GradcheckNaive) {
  gradcheck_norms<false>(true);
  gradcheck_norms<false>(false);
}
TEST(OpsNorm, GradcheckFast) {
  gradcheck_norms<true>(true);
  gradcheck_norms<true>(false);
}

}  // namespace
}  // namespace canonlab
