// The linear families' glue ops as element kernels (the GPU's algorithm, run on the host) against the CPU ops they
// mirror: short_conv.h, gated_rmsnorm.h, ssd/mamba2_io.h, gla/gates.h, delta_rule/inputs.h. In double to 1e-12
// (the same formulas, sums in a different order) and in float to a few ulp; parameter gradients accumulate onto
// non-zero values; outputs start as NaN, so an element a kernel should write and does not fails.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/ops/delta_rule/inputs.h"
#include "engine/ops/delta_rule/inputs_elements.h"
#include "engine/ops/gated_rmsnorm/element_kernels.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "engine/ops/gla/gates.h"
#include "engine/ops/gla/gates_elements.h"
#include "engine/ops/short_conv/element_kernels.h"
#include "engine/ops/short_conv/short_conv.h"
#include "engine/ops/ssd/mamba2_io.h"
#include "engine/ops/ssd/mamba2_io_elements.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

template <class T>
std::vector<T> nans(size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

// double: the same formulas in another summation order; float: a few ulp of elementwise math and short sums
template <class T>
void expect_near(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  const double tol = sizeof(T) == 8 ? 1e-12 : 2e-5;
  ASSERT_EQ(got.size(), want.size()) << what;
  const auto r = compare(got.data(), want.data(), got.size(), tol, tol);
  EXPECT_TRUE(r.ok) << what << " " << r.message;
}

std::vector<double> partial_scratch(int J) { return std::vector<double>(size_t(kRowBlocks) * J, 0.0); }

template <class T>
void check_short_conv(bool silu, bool bias) {
  const int N = 37, C = 13, ldy = 20;
  const auto conv = random_vector<T>(size_t(N) * C, 1), b = random_vector<T>(C, 2), dy = random_vector<T>(size_t(N) * ldy, 3);
  const auto db0 = random_vector<T>(C, 4);
  auto pre_w = conv, pre_g = conv;
  auto y_w = nans<T>(size_t(N) * ldy), y_g = y_w;
  short_conv_bias_act_forward(y_w.data(), ldy, pre_w.data(), bias ? b.data() : nullptr, N, C, silu);
  short_conv_bias_act_forward_elements(HostLaunch{}, y_g.data(), ldy, pre_g.data(), bias ? b.data() : nullptr, N, C,
                                       silu);
  for (int n = 0; n < N; n++)  // the pad columns of y stay as they were
    for (int c = C; c < ldy; c++) y_w[size_t(n) * ldy + c] = y_g[size_t(n) * ldy + c] = 0;
  expect_near(y_g, y_w, "short conv y");
  expect_near(pre_g, pre_w, "short conv pre");
  auto dpre_w = nans<T>(size_t(N) * C), dpre_g = dpre_w;
  short_conv_act_backward(dpre_w.data(), dy.data(), ldy, pre_w.data(), N, C, silu);
  short_conv_act_backward_elements(HostLaunch{}, dpre_g.data(), dy.data(), ldy, pre_w.data(), N, C, silu);
  expect_near(dpre_g, dpre_w, "short conv dpre");
  auto db_w = db0, db_g = db0;
  auto partial = partial_scratch(C);
  short_conv_bias_backward(db_w.data(), dpre_w.data(), N, C);
  short_conv_bias_backward_elements(HostLaunch{}, db_g.data(), dpre_w.data(), N, C, partial.data());
  expect_near(db_g, db_w, "short conv db");
}

TEST(OpsLinearGlueElements, ShortConvBiasAndActivation) {
  for (bool silu : {false, true})
    for (bool bias : {false, true}) {
      SCOPED_TRACE("silu " + std::to_string(silu) + " bias " + std::to_string(bias));
      check_short_conv<double>(silu, bias);
      check_short_conv<float>(silu, bias);
    }
}

template <class T>
void check_gated_rmsnorm(int G, int Cg, int Cw, bool gated, GateOrder order) {
  const int N = 29, C = G * Cg;
  const auto x = random_vector<T>(size_t(N) * C, 11, -1.5, 2.0), z = random_vector<T>(size_t(N) * C, 12, -3, 3);
  const auto w = random_vector<T>(Cw, 13, 0.5, 1.5), dy = random_vector<T>(size_t(N) * C, 14);
  const auto dw0 = random_vector<T>(Cw, 15);
  const T* zp = gated ? z.data() : nullptr;
  auto y_w = nans<T>(size_t(N) * C), y_g = y_w, r_w = nans<T>(size_t(N) * G), r_g = r_w;
  gated_rmsnorm_forward(y_w.data(), r_w.data(), x.data(), zp, w.data(), N, G, Cg, Cw, T(1e-5), order);
  gated_rmsnorm_forward_elements(HostLaunch{}, y_g.data(), r_g.data(), x.data(), zp, w.data(), N, G, Cg, Cw, T(1e-5),
                                 order);
  expect_near(y_g, y_w, "gated rmsnorm y");
  expect_near(r_g, r_w, "gated rmsnorm rstd");
  auto dx_w = nans<T>(size_t(N) * C), dx_g = dx_w, dz_w = dx_w, dz_g = dx_w;
  auto dw_w = dw0, dw_g = dw0;
  auto partial = partial_scratch(Cw);
  gated_rmsnorm_backward(dx_w.data(), gated ? dz_w.data() : nullptr, dw_w.data(), dy.data(), x.data(), zp, w.data(),
                         r_w.data(), N, G, Cg, Cw, order);
  gated_rmsnorm_backward_elements(HostLaunch{}, dx_g.data(), gated ? dz_g.data() : nullptr, dw_g.data(), dy.data(),
                                  x.data(), zp, w.data(), r_w.data(), N, G, Cg, Cw, order, partial.data());
  expect_near(dx_g, dx_w, "gated rmsnorm dx");
  if (gated) expect_near(dz_g, dz_w, "gated rmsnorm dz");
  expect_near(dw_g, dw_w, "gated rmsnorm dw");
}

TEST(OpsLinearGlueElements, GatedRmsNorm) {
  for (GateOrder order : {GateOrder::norm_then_gate, GateOrder::gate_then_norm})
    for (bool gated : {false, true})
      for (int shared : {0, 1}) {  // per-head shared weight (Cw = Cg) or one weight per channel (Cw = G·Cg)
        SCOPED_TRACE("order " + std::to_string(int(order)) + " gated " + std::to_string(gated) + " shared " +
                     std::to_string(shared));
        const int G = 3, Cg = 10;
        check_gated_rmsnorm<double>(G, Cg, shared ? Cg : G * Cg, gated, order);
        check_gated_rmsnorm<float>(G, Cg, shared ? Cg : G * Cg, gated, order);
      }
}

template <class T>
void check_mamba2_io() {
  const int N = 23, H = 3, P = 4, Di = H * P, GN = 2 * 5, CD = Di + 2 * GN, Dp = Di + CD + H, ld_xbc = CD + 3;
  const auto xbc = random_vector<T>(size_t(N) * ld_xbc, 21), mixed = random_vector<T>(size_t(N) * Dp, 22, -3, 3);
  const auto dt_bias = random_vector<T>(H, 23), A_log = random_vector<T>(H, 24), D = random_vector<T>(H, 25);
  auto split = [&](auto&& run) {
    std::vector<T> x = nans<T>(size_t(N) * Di), Bm = nans<T>(size_t(N) * GN), Cm = Bm, z = x, dt = nans<T>(size_t(N) * H);
    run(x, Bm, Cm, z, dt);
    return std::vector<std::vector<T>>{x, Bm, Cm, z, dt};
  };
  const auto want = split([&](auto& x, auto& Bm, auto& Cm, auto& z, auto& dt) {
    mamba2_split_forward(x.data(), Bm.data(), Cm.data(), z.data(), dt.data(), xbc.data(), ld_xbc, mixed.data(),
                         dt_bias.data(), N, Dp, Di, GN, CD, H);
  });
  const auto got = split([&](auto& x, auto& Bm, auto& Cm, auto& z, auto& dt) {
    mamba2_split_forward_elements(HostLaunch{}, x.data(), Bm.data(), Cm.data(), z.data(), dt.data(), xbc.data(), ld_xbc,
                                  mixed.data(), dt_bias.data(), N, Dp, Di, GN, CD, H);
  });
  for (size_t i = 0; i < want.size(); i++) expect_near(got[i], want[i], "mamba2 split output " + std::to_string(i));

  std::vector<T> A_w(H), A_g(H);
  ssd_decay_rates(A_w.data(), A_log.data(), H);
  ssd_decay_rates_elements(HostLaunch{}, A_g.data(), A_log.data(), H);
  expect_near(A_g, A_w, "A");
  const auto dA = random_vector<T>(H, 26), dA_log0 = random_vector<T>(H, 27);
  auto dA_log_w = dA_log0, dA_log_g = dA_log0;
  ssd_decay_rates_backward(dA_log_w.data(), dA.data(), A_w.data(), H);
  ssd_decay_rates_backward_elements(HostLaunch{}, dA_log_g.data(), dA.data(), A_w.data(), H);
  expect_near(dA_log_g, dA_log_w, "dA_log");

  const auto xs = random_vector<T>(size_t(N) * Di, 28), y0 = random_vector<T>(size_t(N) * Di, 29);
  auto y_w = y0, y_g = y0;
  mamba2_skip_forward(y_w.data(), D.data(), xs.data(), N, H, P);
  mamba2_skip_forward_elements(HostLaunch{}, y_g.data(), D.data(), xs.data(), N, H, P);
  expect_near(y_g, y_w, "D skip");

  const auto dx = random_vector<T>(size_t(N) * Di, 30), dy = random_vector<T>(size_t(N) * Di, 31);
  const auto dB = random_vector<T>(size_t(N) * GN, 32), dC = random_vector<T>(size_t(N) * GN, 33);
  const auto dz = random_vector<T>(size_t(N) * Di, 34), ddt = random_vector<T>(size_t(N) * H, 35);
  const auto ddt_bias0 = random_vector<T>(H, 36), dD0 = random_vector<T>(H, 37);
  // dxbc's pad columns and dmixed's xBC columns are not the op's to write: both start at 0 for the comparison
  std::vector<T> dxbc_w(size_t(N) * ld_xbc, T(0)), dxbc_g = dxbc_w, dmixed_w(size_t(N) * Dp, T(0)), dmixed_g = dmixed_w;
  auto ddt_bias_w = ddt_bias0, ddt_bias_g = ddt_bias0, dD_w = dD0, dD_g = dD0;
  auto partial = partial_scratch(H);
  mamba2_split_backward(dxbc_w.data(), ld_xbc, dmixed_w.data(), ddt_bias_w.data(), dD_w.data(), dx.data(), dy.data(),
                        dB.data(), dC.data(), dz.data(), ddt.data(), mixed.data(), dt_bias.data(), D.data(), xs.data(),
                        N, Dp, Di, GN, CD, H, P);
  mamba2_split_backward_elements(HostLaunch{}, dxbc_g.data(), ld_xbc, dmixed_g.data(), ddt_bias_g.data(), dD_g.data(),
                                 dx.data(), dy.data(), dB.data(), dC.data(), dz.data(), ddt.data(), mixed.data(),
                                 dt_bias.data(), D.data(), xs.data(), N, Dp, Di, GN, CD, H, P, partial.data());
  expect_near(dxbc_g, dxbc_w, "dxbc");
  expect_near(dmixed_g, dmixed_w, "dmixed");
  expect_near(ddt_bias_g, ddt_bias_w, "ddt_bias");
  expect_near(dD_g, dD_w, "dD");
}

TEST(OpsLinearGlueElements, Mamba2SplitSkipAndDecayRates) {
  check_mamba2_io<double>();
  check_mamba2_io<float>();
}

template <class T>
void check_gla_gates(FeatureMap fm, double clamp_min) {
  const int N = 19, Kd = 12, Vd = 7, W = 2 * Kd + Vd;
  const auto qkv = random_vector<T>(size_t(N) * W, 41, -3, 3);
  auto q_w = nans<T>(size_t(N) * Kd), k_w = q_w, v_w = nans<T>(size_t(N) * Vd), q_g = q_w, k_g = k_w, v_g = v_w;
  gla_feature_forward(q_w.data(), k_w.data(), v_w.data(), qkv.data(), N, Kd, Vd, fm);
  gla_feature_forward_elements(HostLaunch{}, q_g.data(), k_g.data(), v_g.data(), qkv.data(), N, Kd, Vd, fm);
  expect_near(q_g, q_w, "phi(q)");
  expect_near(k_g, k_w, "phi(k)");
  expect_near(v_g, v_w, "v");
  const auto dq = random_vector<T>(size_t(N) * Kd, 42), dk = random_vector<T>(size_t(N) * Kd, 43);
  const auto dv = random_vector<T>(size_t(N) * Vd, 44);
  auto dqkv_w = nans<T>(size_t(N) * W), dqkv_g = dqkv_w;
  gla_feature_backward(dqkv_w.data(), dq.data(), dk.data(), dv.data(), qkv.data(), N, Kd, Vd, fm);
  gla_feature_backward_elements(HostLaunch{}, dqkv_g.data(), dq.data(), dk.data(), dv.data(), qkv.data(), N, Kd, Vd,
                                fm);
  expect_near(dqkv_g, dqkv_w, "dqkv");

  const size_t n = 300;
  const auto logit = random_vector<T>(n, 45, -8, 8), dg = random_vector<T>(n, 46);
  auto g_w = nans<T>(n), g_g = g_w, dl_w = g_w, dl_g = g_w;
  gla_gate_forward(g_w.data(), logit.data(), n, 16.0, clamp_min);
  gla_gate_forward_elements(HostLaunch{}, g_g.data(), logit.data(), n, 16.0, clamp_min);
  expect_near(g_g, g_w, "forget gate");
  gla_gate_backward(dl_w.data(), dg.data(), logit.data(), n, 16.0, clamp_min);
  gla_gate_backward_elements(HostLaunch{}, dl_g.data(), dg.data(), logit.data(), n, 16.0, clamp_min);
  expect_near(dl_g, dl_w, "forget gate logit gradient");
}

TEST(OpsLinearGlueElements, GlaFeatureMapsAndForgetGate) {
  for (FeatureMap fm : {FeatureMap::none, FeatureMap::elu_plus_one, FeatureMap::relu, FeatureMap::silu})
    for (double clamp : {0.0, -0.3}) {  // -0.3: about a third of the gates clamp
      SCOPED_TRACE("feature map " + std::to_string(int(fm)) + " clamp " + std::to_string(clamp));
      check_gla_gates<double>(fm, clamp);
      check_gla_gates<float>(fm, clamp);
    }
}

template <class T>
void check_delta_inputs(bool gated) {
  const int N = 17, H = 3, K = 8, Vd = 10, Kd = H * K, W = 2 * Kd + Vd;
  const auto qkv = random_vector<T>(size_t(N) * W, 51), bl = random_vector<T>(size_t(N) * H, 52, -3, 3);
  const auto al = random_vector<T>(size_t(N) * H, 53, -3, 3), A_log = random_vector<T>(H, 54, -1, 1);
  const auto dt_bias = random_vector<T>(H, 55);
  const T* ap = gated ? al.data() : nullptr;
  struct Out {
    std::vector<T> q, k, v, qr, kr, beta, g;
  };
  auto fresh = [&] {
    return Out{nans<T>(size_t(N) * Kd), nans<T>(size_t(N) * Kd), nans<T>(size_t(N) * Vd), nans<T>(size_t(N) * H),
               nans<T>(size_t(N) * H),  nans<T>(size_t(N) * H),  nans<T>(size_t(N) * H)};
  };
  Out w = fresh(), e = fresh();
  delta_inputs_forward(w.q.data(), w.k.data(), w.v.data(), w.qr.data(), w.kr.data(), w.beta.data(), w.g.data(),
                       qkv.data(), bl.data(), ap, A_log.data(), dt_bias.data(), N, H, K, Vd, 2.0);
  delta_inputs_forward_elements(HostLaunch{}, e.q.data(), e.k.data(), e.v.data(), e.qr.data(), e.kr.data(),
                                e.beta.data(), e.g.data(), qkv.data(), bl.data(), ap, A_log.data(), dt_bias.data(), N,
                                H, K, Vd, 2.0);
  expect_near(e.q, w.q, "q");
  expect_near(e.k, w.k, "k");
  expect_near(e.v, w.v, "v");
  expect_near(e.qr, w.qr, "q rstd");
  expect_near(e.kr, w.kr, "k rstd");
  expect_near(e.beta, w.beta, "beta");
  if (gated) expect_near(e.g, w.g, "g");

  const size_t nh = size_t(N) * H;
  const auto dbeta = random_vector<T>(nh, 56), dg = random_vector<T>(nh, 57);
  auto dl_w = nans<T>(nh), dl_g = dl_w;
  delta_beta_backward(dl_w.data(), dbeta.data(), bl.data(), nh, 2.0);
  delta_beta_backward_elements(HostLaunch{}, dl_g.data(), dbeta.data(), bl.data(), nh, 2.0);
  expect_near(dl_g, dl_w, "beta logit gradient");
  if (gated) {
    const auto dA0 = random_vector<T>(H, 58), db0 = random_vector<T>(H, 59);
    auto du_w = nans<T>(nh), du_g = du_w, dA_w = dA0, dA_g = dA0, db_w = db0, db_g = db0;
    auto partial = partial_scratch(H);
    delta_decay_backward(du_w.data(), dA_w.data(), db_w.data(), dg.data(), al.data(), w.g.data(), A_log.data(),
                         dt_bias.data(), N, H);
    delta_decay_backward_elements(HostLaunch{}, du_g.data(), dA_g.data(), db_g.data(), dg.data(), al.data(),
                                  w.g.data(), A_log.data(), dt_bias.data(), N, H, partial.data());
    expect_near(du_g, du_w, "decay logit gradient");
    expect_near(dA_g, dA_w, "dA_log");
    expect_near(db_g, db_w, "ddt_bias");
  }
  const auto dq = random_vector<T>(size_t(N) * Kd, 60), dk = random_vector<T>(size_t(N) * Kd, 61);
  const auto dv = random_vector<T>(size_t(N) * Vd, 62);
  auto dqkv_w = nans<T>(size_t(N) * W), dqkv_g = dqkv_w;
  delta_inputs_backward(dqkv_w.data(), dq.data(), dk.data(), dv.data(), w.q.data(), w.k.data(), w.qr.data(),
                        w.kr.data(), N, H, K, Vd);
  delta_inputs_backward_elements(HostLaunch{}, dqkv_g.data(), dq.data(), dk.data(), dv.data(), w.q.data(), w.k.data(),
                                 w.qr.data(), w.kr.data(), N, H, K, Vd);
  expect_near(dqkv_g, dqkv_w, "dqkv");
}

TEST(OpsLinearGlueElements, DeltaNetInputs) {
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "DeltaNet");
    check_delta_inputs<double>(gated);
    check_delta_inputs<float>(gated);
  }
}

}  // namespace
}  // namespace canonlab
