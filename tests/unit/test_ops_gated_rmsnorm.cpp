// gated_rmsnorm: finite differences in double for x, z and w in both gate orders, per-head (shared weight) and
// grouped (full-width weight) layouts, with and without a gate; and the forward against the composition of the
// plain ops (rmsnorm_forward, silu) it replaces.
#include <gtest/gtest.h>

#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "engine/ops/norm/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

struct Layout {
  int N, G, Cg, Cw;
  bool gated;
  GateOrder order;
};

class GatedRmsnormGrad : public ::testing::TestWithParam<Layout> {};

TEST_P(GatedRmsnormGrad, MatchesFiniteDifferences) {
  const Layout L = GetParam();
  const size_t n = size_t(L.N) * L.G * L.Cg;
  std::vector<double> x = test::random_vector(n, 1), z = test::random_vector(n, 2, -2, 2);
  std::vector<double> w = test::random_vector(L.Cw, 3, 0.5, 1.5), r = test::random_vector(n, 4);
  const double* zp = L.gated ? z.data() : nullptr;
  std::vector<double> y(n), rstd(size_t(L.N) * L.G);
  auto loss = [&] {
    gated_rmsnorm_forward(y.data(), rstd.data(), x.data(), zp, w.data(), L.N, L.G, L.Cg, L.Cw, 1e-5, L.order);
    return test::dot(y, r);
  };
  loss();
  std::vector<double> dx(n), dz(n), dw(L.Cw, 0.0);
  gated_rmsnorm_backward(dx.data(), L.gated ? dz.data() : nullptr, dw.data(), r.data(), x.data(), zp, w.data(),
                         rstd.data(), L.N, L.G, L.Cg, L.Cw, L.order);
  auto rx = test::gradcheck(loss, x.data(), n, dx.data());
  EXPECT_TRUE(rx.ok) << "dx " << rx.message;
  auto rw = test::gradcheck(loss, w.data(), w.size(), dw.data());
  EXPECT_TRUE(rw.ok) << "dw " << rw.message;
  if (L.gated) {
    auto rz = test::gradcheck(loss, z.data(), n, dz.data());
    EXPECT_TRUE(rz.ok) << "dz " << rz.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GatedRmsnormGrad,
                         ::testing::Values(Layout{5, 3, 4, 4, true, GateOrder::norm_then_gate},    // per head
                                           Layout{5, 3, 4, 4, false, GateOrder::norm_then_gate},   // no gate
                                           Layout{5, 1, 12, 12, true, GateOrder::gate_then_norm},  // Mamba2, G = 1
                                           Layout{7, 2, 6, 12, true, GateOrder::gate_then_norm},   // Mamba2, G = 2
                                           Layout{70, 2, 3, 6, true, GateOrder::norm_then_gate}));  // > 64 row blocks

// The fused op equals rmsnorm of the gated input (Mamba2) and silu-gated rmsnorm output (GLA, GDN), built from
// the plain reference ops.
TEST(GatedRmsnorm, EqualsTheCompositionOfPlainOps) {
  const int N = 6, C = 8;
  std::vector<double> x = test::random_vector(size_t(N) * C, 5), z = test::random_vector(size_t(N) * C, 6, -3, 3);
  std::vector<double> w = test::random_vector(C, 7, 0.5, 1.5), gate(size_t(N) * C), u(size_t(N) * C);
  silu_forward(gate.data(), z.data(), gate.size());
  for (size_t i = 0; i < u.size(); i++) u[i] = x[i] * gate[i];
  std::vector<double> want(u.size()), got(u.size()), rstd(N), rstd2(N);
  rmsnorm_forward_naive(want.data(), rstd.data(), u.data(), w.data(), N, C, 1e-5);
  gated_rmsnorm_forward(got.data(), rstd2.data(), x.data(), z.data(), w.data(), N, 1, C, C, 1e-5, GateOrder::gate_then_norm);
  auto c1 = test::compare(got.data(), want.data(), got.size(), 1e-12, 1e-14);
  EXPECT_TRUE(c1.ok) << c1.message;
  rmsnorm_forward_naive(want.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  for (size_t i = 0; i < want.size(); i++) want[i] *= gate[i];
  gated_rmsnorm_forward(got.data(), rstd2.data(), x.data(), z.data(), w.data(), N, 1, C, C, 1e-5, GateOrder::norm_then_gate);
  auto c2 = test::compare(got.data(), want.data(), got.size(), 1e-12, 1e-14);
  EXPECT_TRUE(c2.ok) << c2.message;
}

}  // namespace
}  // namespace canonlab
