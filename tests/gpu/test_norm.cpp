// RMSNorm and LayerNorm on the GPU against naive.h (double accumulation), with and without learnable scale and
// bias, over row counts around the backward's chunk size and channel counts that are not multiples of a warp;
// dw/db accumulate onto what was there; the backward twice gives the same bits.
#include <cmath>
#include <ostream>
#include <vector>

#include "engine/ops/norm/cuda.h"
#include "engine/ops/norm/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct NormCase {
  int N, C;
  bool affine;
};
std::ostream& operator<<(std::ostream& os, const NormCase& c) {
  return os << "N=" << c.N << " C=" << c.C << " affine=" << c.affine;
}

class GpuNorm : public GpuTestWithParam<NormCase> {};

TEST_P(GpuNorm, RmsNormMatchesNaive) {
  const auto p = GetParam();
  const size_t n = size_t(p.N) * p.C;
  // an offset mean makes the scale matter; w away from 1 makes its gradient matter
  const auto x = random_vector<float>(n, 1, -1.5, 2.5), dy = random_vector<float>(n, 2);
  const auto w = random_vector<float>(p.C, 3, 0.5, 1.5), dw0 = random_vector<float>(p.C, 4);
  const float* wp = p.affine ? w.data() : nullptr;
  std::vector<float> y(n), rstd(p.N), dx(n), dw = dw0;
  rmsnorm_forward_naive(y.data(), rstd.data(), x.data(), wp, p.N, p.C, 1e-5f);
  rmsnorm_backward_naive(dx.data(), dw.data(), dy.data(), x.data(), wp, rstd.data(), p.N, p.C);

  const auto x_d = to_device(x), dy_d = to_device(dy), w_d = to_device(w);
  const float* wd = p.affine ? w_d.data() : nullptr;
  auto y_d = poisoned(n), r_d = poisoned(p.N), dx_d = poisoned(n);
  cuda::DeviceBuffer<double> scratch(cuda::norm_backward_scratch_size(p.N, p.C));
  cuda::rmsnorm_forward(stream(), y_d.data(), r_d.data(), x_d.data(), wd, p.N, p.C, 1e-5f);
  auto y2_d = poisoned(n), r2_d = poisoned(p.N);  // the forward again: the same bits
  cuda::rmsnorm_forward(stream(), y2_d.data(), r2_d.data(), x_d.data(), wd, p.N, p.C, 1e-5f);
  std::vector<std::vector<float>> dxs, dws;
  for (int rep = 0; rep < 2; rep++) {
    auto dw_d = to_device(dw0);
    cuda::rmsnorm_backward(stream(), dx_d.data(), dw_d.data(), dy_d.data(), x_d.data(), wd, r_d.data(), p.N, p.C,
                           scratch.data());
    sync();
    dxs.push_back(dx_d.download());
    dws.push_back(dw_d.download());
  }
  auto r = compare_with(y_d.download(), y, kReduction);
  EXPECT_TRUE(r.ok) << "y " << r.message;
  r = compare_with(r_d.download(), rstd, kReduction);
  EXPECT_TRUE(r.ok) << "rstd " << r.message;
  r = compare_with(dxs[0], dx, kReduction);
  EXPECT_TRUE(r.ok) << "dx " << r.message;
  r = compare_with(dws[0], dw, kReduction);
  EXPECT_TRUE(r.ok) << "dw " << r.message;
  EXPECT_TRUE(bit_equal(dxs[0], dxs[1])) << "dx differs between two identical launches";
  EXPECT_TRUE(bit_equal(dws[0], dws[1])) << "dw differs between two identical launches";
  EXPECT_TRUE(bit_equal(y_d.download(), y2_d.download())) << "y differs between two identical launches";
  EXPECT_TRUE(bit_equal(r_d.download(), r2_d.download())) << "rstd differs between two identical launches";
}

TEST_P(GpuNorm, LayerNormMatchesNaive) {
  const auto p = GetParam();
  const size_t n = size_t(p.N) * p.C;
  // a mean far from 0 relative to the spread: where one-pass variance would cancel
  const auto x = random_vector<float>(n, 5, 9, 11), dy = random_vector<float>(n, 6);
  const auto w = random_vector<float>(p.C, 7, 0.5, 1.5), b = random_vector<float>(p.C, 8);
  const auto dw0 = random_vector<float>(p.C, 9), db0 = random_vector<float>(p.C, 10);
  const float* wp = p.affine ? w.data() : nullptr;
  const float* bp = p.affine ? b.data() : nullptr;
  std::vector<float> y(n), mean(p.N), rstd(p.N), dx(n), dw = dw0, db = db0;
  layernorm_forward_naive(y.data(), mean.data(), rstd.data(), x.data(), wp, bp, p.N, p.C, 1e-5f);
  layernorm_backward_naive(dx.data(), dw.data(), p.affine ? db.data() : nullptr, dy.data(), x.data(), wp, mean.data(),
                           rstd.data(), p.N, p.C);

  const auto x_d = to_device(x), dy_d = to_device(dy), w_d = to_device(w), b_d = to_device(b);
  auto y_d = poisoned(n), m_d = poisoned(p.N), r_d = poisoned(p.N);
  cuda::DeviceBuffer<double> scratch(cuda::norm_backward_scratch_size(p.N, p.C));
  cuda::layernorm_forward(stream(), y_d.data(), m_d.data(), r_d.data(), x_d.data(), p.affine ? w_d.data() : nullptr,
                          p.affine ? b_d.data() : nullptr, p.N, p.C, 1e-5f);
  auto y2_d = poisoned(n), m2_d = poisoned(p.N), r2_d = poisoned(p.N);  // the forward again: the same bits
  cuda::layernorm_forward(stream(), y2_d.data(), m2_d.data(), r2_d.data(), x_d.data(), p.affine ? w_d.data() : nullptr,
                          p.affine ? b_d.data() : nullptr, p.N, p.C, 1e-5f);
  std::vector<std::vector<float>> dxs, dws, dbs;
  for (int rep = 0; rep < 2; rep++) {
    auto dx_d = poisoned(n), dw_d = to_device(dw0), db_d = to_device(db0);
    cuda::layernorm_backward(stream(), dx_d.data(), dw_d.data(), p.affine ? db_d.data() : nullptr, dy_d.data(),
                             x_d.data(), p.affine ? w_d.data() : nullptr, m_d.data(), r_d.data(), p.N, p.C,
                             scratch.data());
    sync();
    dxs.push_back(dx_d.download());
    dws.push_back(dw_d.download());
    dbs.push_back(db_d.download());
  }
  auto r = compare_with(y_d.download(), y, kReduction);
  EXPECT_TRUE(r.ok) << "y " << r.message;
  r = compare_with(m_d.download(), mean, kReduction);
  EXPECT_TRUE(r.ok) << "mean " << r.message;
  r = compare_with(r_d.download(), rstd, kReduction);
  EXPECT_TRUE(r.ok) << "rstd " << r.message;
  r = compare_with(dxs[0], dx, kReduction);
  EXPECT_TRUE(r.ok) << "dx " << r.message;
  r = compare_with(dws[0], dw, kReduction);
  EXPECT_TRUE(r.ok) << "dw " << r.message;
  r = compare_with(dbs[0], db, kReduction);
  EXPECT_TRUE(r.ok) << "db " << r.message;
  EXPECT_TRUE(bit_equal(dxs[0], dxs[1]));
  EXPECT_TRUE(bit_equal(dws[0], dws[1]));
  EXPECT_TRUE(bit_equal(dbs[0], dbs[1]));
  EXPECT_TRUE(bit_equal(y_d.download(), y2_d.download()));
  EXPECT_TRUE(bit_equal(m_d.download(), m2_d.download()));
  EXPECT_TRUE(bit_equal(r_d.download(), r2_d.download()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuNorm,
                         ::testing::Values(NormCase{1, 1, true}, NormCase{7, 31, true}, NormCase{33, 128, false},
                                           NormCase{64, 33, true}, NormCase{65, 128, true}, NormCase{300, 769, true},
                                           NormCase{3001, 96, true}, NormCase{70001, 20, true}));

}  // namespace
}  // namespace canonlab::test
