// The linear families' glue on the GPU against the CPU ops it mirrors (short_conv.h, gated_rmsnorm.h,
// ssd/mamba2_io.h, gla/gates.h, delta_rule/inputs.h): outputs poisoned with NaN first, parameter gradients accumulated
// onto non-zero values, the reductions (bias, weight and per-head sums) run twice and compared bit for bit.
#include <string>
#include <vector>

#include "engine/ops/delta_rule/cuda.h"
#include "engine/ops/delta_rule/inputs.h"
#include "engine/ops/gated_rmsnorm/cuda.h"
#include "engine/ops/gated_rmsnorm/gated_rmsnorm.h"
#include "engine/ops/gla/cuda.h"
#include "engine/ops/gla/gates.h"
#include "engine/ops/short_conv/cuda.h"
#include "engine/ops/short_conv/short_conv.h"
#include "engine/ops/ssd/cuda.h"
#include "engine/ops/ssd/mamba2_io.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

// elementwise math against the CPU's polynomial exp, and short sums in double
constexpr Tolerance kGlue{2e-5, 2e-5};

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  const auto r = compare_with(got, want, kGlue);
  EXPECT_TRUE(r.ok) << what << " " << r.message;
}

class GpuLinearGlue : public GpuTest {};

TEST_F(GpuLinearGlue, ShortConvBiasActivationAndBiasGradient) {
  const int N = 300, C = 24, ldy = 40;
  for (bool silu : {false, true}) {
    SCOPED_TRACE(silu ? "silu" : "identity");
    const auto conv = random_vector<float>(size_t(N) * C, 1), b = random_vector<float>(C, 2);
    const auto dy = random_vector<float>(size_t(N) * ldy, 3), db0 = random_vector<float>(C, 4);
    auto pre = conv;
    std::vector<float> y(size_t(N) * ldy, 0.0f), dpre(size_t(N) * C), db = db0;
    short_conv_bias_act_forward(y.data(), ldy, pre.data(), b.data(), N, C, silu);
    short_conv_act_backward(dpre.data(), dy.data(), ldy, pre.data(), N, C, silu);
    short_conv_bias_backward(db.data(), dpre.data(), N, C);

    auto pre_d = to_device(conv), y_d = to_device(std::vector<float>(size_t(N) * ldy, 0.0f));
    const auto b_d = to_device(b), dy_d = to_device(dy);
    auto dpre_d = poisoned(size_t(N) * C);
    cuda::DeviceBuffer<double> scratch(cuda::short_conv_bias_backward_scratch_size(C));
    cuda::short_conv_bias_act_forward(stream(), y_d.data(), ldy, pre_d.data(), b_d.data(), N, C, silu);
    cuda::short_conv_act_backward(stream(), dpre_d.data(), dy_d.data(), ldy, pre_d.data(), N, C, silu);
    std::vector<std::vector<float>> dbs;
    for (int rep = 0; rep < 2; rep++) {
      auto db_d = to_device(db0);
      cuda::short_conv_bias_backward(stream(), db_d.data(), dpre_d.data(), N, C, scratch.data());
      sync();
      dbs.push_back(db_d.download());
    }
    expect_near(y_d.download(), y, "y");
    expect_near(pre_d.download(), pre, "pre");
    expect_near(dpre_d.download(), dpre, "dpre");
    expect_near(dbs[0], db, "db");
    EXPECT_TRUE(bit_equal(dbs[0], dbs[1])) << "db differs between two identical launches";
  }
}

TEST_F(GpuLinearGlue, GatedRmsNormBothOrdersSharedAndPerChannelWeights) {
  const int N = 257, G = 4, Cg = 24, C = G * Cg;
  for (GateOrder order : {GateOrder::norm_then_gate, GateOrder::gate_then_norm})
    for (int Cw : {Cg, C}) {
      SCOPED_TRACE("order " + std::to_string(int(order)) + " Cw " + std::to_string(Cw));
      const auto x = random_vector<float>(size_t(N) * C, 11, -1.5, 2.0), z = random_vector<float>(size_t(N) * C, 12, -3, 3);
      const auto w = random_vector<float>(Cw, 13, 0.5, 1.5), dy = random_vector<float>(size_t(N) * C, 14);
      const auto dw0 = random_vector<float>(Cw, 15);
      std::vector<float> y(size_t(N) * C), rstd(size_t(N) * G), dx(size_t(N) * C), dz(size_t(N) * C), dw = dw0;
      gated_rmsnorm_forward(y.data(), rstd.data(), x.data(), z.data(), w.data(), N, G, Cg, Cw, 1e-5f, order);
      gated_rmsnorm_backward(dx.data(), dz.data(), dw.data(), dy.data(), x.data(), z.data(), w.data(), rstd.data(), N,
                             G, Cg, Cw, order);

      const auto x_d = to_device(x), z_d = to_device(z), w_d = to_device(w), dy_d = to_device(dy);
      auto y_d = poisoned(size_t(N) * C), r_d = poisoned(size_t(N) * G), dx_d = poisoned(size_t(N) * C),
           dz_d = poisoned(size_t(N) * C);
      cuda::DeviceBuffer<double> scratch(cuda::gated_rmsnorm_backward_scratch_size(Cw));
      cuda::gated_rmsnorm_forward(stream(), y_d.data(), r_d.data(), x_d.data(), z_d.data(), w_d.data(), N, G, Cg, Cw,
                                  1e-5f, order);
      std::vector<std::vector<float>> dws;
      for (int rep = 0; rep < 2; rep++) {
        auto dw_d = to_device(dw0);
        cuda::gated_rmsnorm_backward(stream(), dx_d.data(), dz_d.data(), dw_d.data(), dy_d.data(), x_d.data(),
                                     z_d.data(), w_d.data(), r_d.data(), N, G, Cg, Cw, order, scratch.data());
        sync();
        dws.push_back(dw_d.download());
      }
      expect_near(y_d.download(), y, "y");
      expect_near(r_d.download(), rstd, "rstd");
      expect_near(dx_d.download(), dx, "dx");
      expect_near(dz_d.download(), dz, "dz");
      expect_near(dws[0], dw, "dw");
      EXPECT_TRUE(bit_equal(dws[0], dws[1])) << "dw differs between two identical launches";
    }
}

TEST_F(GpuLinearGlue, Mamba2SplitSkipAndDecayRates) {
  const int N = 131, H = 4, P = 8, Di = H * P, GN = 2 * 6, CD = Di + 2 * GN, Dp = Di + CD + H, ld = CD;
  const auto xbc = random_vector<float>(size_t(N) * ld, 21), mixed = random_vector<float>(size_t(N) * Dp, 22, -3, 3);
  const auto dt_bias = random_vector<float>(H, 23), A_log = random_vector<float>(H, 24), D = random_vector<float>(H, 25);
  std::vector<float> x(size_t(N) * Di), Bm(size_t(N) * GN), Cm(Bm.size()), z(x.size()), dt(size_t(N) * H), A(H);
  mamba2_split_forward(x.data(), Bm.data(), Cm.data(), z.data(), dt.data(), xbc.data(), ld, mixed.data(),
                       dt_bias.data(), N, Dp, Di, GN, CD, H);
  ssd_decay_rates(A.data(), A_log.data(), H);
  const auto y0 = random_vector<float>(x.size(), 26);
  auto y = y0;
  mamba2_skip_forward(y.data(), D.data(), x.data(), N, H, P);
  const auto dx = random_vector<float>(x.size(), 27), dy = random_vector<float>(x.size(), 28);
  const auto dB = random_vector<float>(Bm.size(), 29), dC = random_vector<float>(Bm.size(), 30);
  const auto dz = random_vector<float>(x.size(), 31), ddt = random_vector<float>(dt.size(), 32);
  const auto ddt_bias0 = random_vector<float>(H, 33), dD0 = random_vector<float>(H, 34);
  std::vector<float> dxbc(size_t(N) * ld), dmixed(size_t(N) * Dp, 0.0f), ddt_bias = ddt_bias0, dD = dD0;
  mamba2_split_backward(dxbc.data(), ld, dmixed.data(), ddt_bias.data(), dD.data(), dx.data(), dy.data(), dB.data(),
                        dC.data(), dz.data(), ddt.data(), mixed.data(), dt_bias.data(), D.data(), x.data(), N, Dp, Di,
                        GN, CD, H, P);

  const auto xbc_d = to_device(xbc), mixed_d = to_device(mixed), dt_bias_d = to_device(dt_bias), A_log_d = to_device(A_log),
             D_d = to_device(D);
  auto x_d = poisoned(x.size()), Bm_d = poisoned(Bm.size()), Cm_d = poisoned(Bm.size()), z_d = poisoned(x.size()),
       dt_d = poisoned(dt.size()), A_d = poisoned(H), y_d = to_device(y0);
  cuda::mamba2_split_forward(stream(), x_d.data(), Bm_d.data(), Cm_d.data(), z_d.data(), dt_d.data(), xbc_d.data(), ld,
                             mixed_d.data(), dt_bias_d.data(), N, Dp, Di, GN, CD, H);
  cuda::ssd_decay_rates(stream(), A_d.data(), A_log_d.data(), H);
  cuda::mamba2_skip_forward(stream(), y_d.data(), D_d.data(), x_d.data(), N, H, P);
  const auto dx_d = to_device(dx), dy_d = to_device(dy), dB_d = to_device(dB), dC_d = to_device(dC),
             dz_d = to_device(dz), ddt_d = to_device(ddt);
  auto dxbc_d = poisoned(dxbc.size()), dmixed_d = to_device(std::vector<float>(dmixed.size(), 0.0f));
  cuda::DeviceBuffer<double> scratch(cuda::mamba2_split_backward_scratch_size(H));
  std::vector<std::vector<float>> sums;
  for (int rep = 0; rep < 2; rep++) {
    auto ddt_bias_d = to_device(ddt_bias0), dD_d = to_device(dD0);
    cuda::mamba2_split_backward(stream(), dxbc_d.data(), ld, dmixed_d.data(), ddt_bias_d.data(), dD_d.data(),
                                dx_d.data(), dy_d.data(), dB_d.data(), dC_d.data(), dz_d.data(), ddt_d.data(),
                                mixed_d.data(), dt_bias_d.data(), D_d.data(), x_d.data(), N, Dp, Di, GN, CD, H, P,
                                scratch.data());
    sync();
    sums.push_back(ddt_bias_d.download());
    sums.push_back(dD_d.download());
  }
  expect_near(x_d.download(), x, "x");
  expect_near(Bm_d.download(), Bm, "B");
  expect_near(Cm_d.download(), Cm, "C");
  expect_near(z_d.download(), z, "z");
  expect_near(dt_d.download(), dt, "dt");
  expect_near(A_d.download(), A, "A");
  expect_near(y_d.download(), y, "y + D x");
  expect_near(dxbc_d.download(), dxbc, "dxbc");
  expect_near(dmixed_d.download(), dmixed, "dmixed");
  expect_near(sums[0], ddt_bias, "ddt_bias");
  expect_near(sums[1], dD, "dD");
  EXPECT_TRUE(bit_equal(sums[0], sums[2])) << "ddt_bias differs between two identical launches";
  EXPECT_TRUE(bit_equal(sums[1], sums[3])) << "dD differs between two identical launches";
}

TEST_F(GpuLinearGlue, GlaFeatureMapsAndForgetGate) {
  const int N = 77, Kd = 20, Vd = 12, W = 2 * Kd + Vd;
  const size_t n = size_t(N) * Kd;
  for (FeatureMap fm : {FeatureMap::none, FeatureMap::elu_plus_one, FeatureMap::relu, FeatureMap::silu}) {
    SCOPED_TRACE("feature map " + std::to_string(int(fm)));
    const auto qkv = random_vector<float>(size_t(N) * W, 41, -3, 3), dq = random_vector<float>(n, 42),
               dk = random_vector<float>(n, 43), dv = random_vector<float>(size_t(N) * Vd, 44);
    std::vector<float> q(n), k(n), v(size_t(N) * Vd), dqkv(qkv.size());
    gla_feature_forward(q.data(), k.data(), v.data(), qkv.data(), N, Kd, Vd, fm);
    gla_feature_backward(dqkv.data(), dq.data(), dk.data(), dv.data(), qkv.data(), N, Kd, Vd, fm);
    const auto qkv_d = to_device(qkv), dq_d = to_device(dq), dk_d = to_device(dk), dv_d = to_device(dv);
    auto q_d = poisoned(n), k_d = poisoned(n), v_d = poisoned(v.size()), dqkv_d = poisoned(qkv.size());
    cuda::gla_feature_forward(stream(), q_d.data(), k_d.data(), v_d.data(), qkv_d.data(), N, Kd, Vd, fm);
    cuda::gla_feature_backward(stream(), dqkv_d.data(), dq_d.data(), dk_d.data(), dv_d.data(), qkv_d.data(), N, Kd, Vd,
                               fm);
    sync();
    expect_near(q_d.download(), q, "q");
    expect_near(k_d.download(), k, "k");
    expect_near(v_d.download(), v, "v");
    expect_near(dqkv_d.download(), dqkv, "dqkv");
  }
  for (double clamp : {0.0, -0.3}) {
    SCOPED_TRACE("clamp " + std::to_string(clamp));
    const auto logit = random_vector<float>(n, 45, -8, 8), dg = random_vector<float>(n, 46);
    std::vector<float> g(n), dl(n);
    gla_gate_forward(g.data(), logit.data(), n, 16.0, clamp);
    gla_gate_backward(dl.data(), dg.data(), logit.data(), n, 16.0, clamp);
    const auto logit_d = to_device(logit), dg_d = to_device(dg);
    auto g_d = poisoned(n), dl_d = poisoned(n);
    cuda::gla_gate_forward(stream(), g_d.data(), logit_d.data(), n, 16.0, clamp);
    cuda::gla_gate_backward(stream(), dl_d.data(), dg_d.data(), logit_d.data(), n, 16.0, clamp);
    sync();
    expect_near(g_d.download(), g, "gate");
    expect_near(dl_d.download(), dl, "gate logit gradient");
  }
}

TEST_F(GpuLinearGlue, DeltaNetInputs) {
  const int N = 93, H = 3, K = 16, Vd = 40, Kd = H * K, W = 2 * Kd + Vd;
  const size_t nh = size_t(N) * H;
  const auto qkv = random_vector<float>(size_t(N) * W, 51), bl = random_vector<float>(nh, 52, -3, 3),
             al = random_vector<float>(nh, 53, -3, 3), A_log = random_vector<float>(H, 54, -1, 1),
             dt_bias = random_vector<float>(H, 55);
  std::vector<float> q(size_t(N) * Kd), k(q.size()), v(size_t(N) * Vd), qr(nh), kr(nh), beta(nh), g(nh);
  delta_inputs_forward(q.data(), k.data(), v.data(), qr.data(), kr.data(), beta.data(), g.data(), qkv.data(), bl.data(),
                       al.data(), A_log.data(), dt_bias.data(), N, H, K, Vd, 2.0);
  const auto dbeta = random_vector<float>(nh, 56), dg = random_vector<float>(nh, 57),
             dA0 = random_vector<float>(H, 58), db0 = random_vector<float>(H, 59),
             dq = random_vector<float>(q.size(), 60), dk = random_vector<float>(q.size(), 61),
             dv = random_vector<float>(v.size(), 62);
  std::vector<float> dbl(nh), du(nh), dA = dA0, db = db0, dqkv(qkv.size());
  delta_beta_backward(dbl.data(), dbeta.data(), bl.data(), nh, 2.0);
  delta_decay_backward(du.data(), dA.data(), db.data(), dg.data(), al.data(), g.data(), A_log.data(), dt_bias.data(), N,
                       H);
  delta_inputs_backward(dqkv.data(), dq.data(), dk.data(), dv.data(), q.data(), k.data(), qr.data(), kr.data(), N, H, K,
                        Vd);

  const auto qkv_d = to_device(qkv), bl_d = to_device(bl), al_d = to_device(al), A_log_d = to_device(A_log),
             dt_bias_d = to_device(dt_bias);
  auto q_d = poisoned(q.size()), k_d = poisoned(q.size()), v_d = poisoned(v.size()), qr_d = poisoned(nh),
       kr_d = poisoned(nh), beta_d = poisoned(nh), g_d = poisoned(nh);
  cuda::delta_inputs_forward(stream(), q_d.data(), k_d.data(), v_d.data(), qr_d.data(), kr_d.data(), beta_d.data(),
                             g_d.data(), qkv_d.data(), bl_d.data(), al_d.data(), A_log_d.data(), dt_bias_d.data(), N, H,
                             K, Vd, 2.0);
  const auto dbeta_d = to_device(dbeta), dg_d = to_device(dg), dq_d = to_device(dq), dk_d = to_device(dk),
             dv_d = to_device(dv);
  auto dbl_d = poisoned(nh), du_d = poisoned(nh), dqkv_d = poisoned(qkv.size());
  cuda::delta_beta_backward(stream(), dbl_d.data(), dbeta_d.data(), bl_d.data(), nh, 2.0);
  cuda::DeviceBuffer<double> scratch(cuda::delta_decay_backward_scratch_size(H));
  std::vector<std::vector<float>> sums;
  for (int rep = 0; rep < 2; rep++) {
    auto dA_d = to_device(dA0), db_d = to_device(db0);
    cuda::delta_decay_backward(stream(), du_d.data(), dA_d.data(), db_d.data(), dg_d.data(), al_d.data(), g_d.data(),
                               A_log_d.data(), dt_bias_d.data(), N, H, scratch.data());
    sync();
    sums.push_back(dA_d.download());
    sums.push_back(db_d.download());
  }
  cuda::delta_inputs_backward(stream(), dqkv_d.data(), dq_d.data(), dk_d.data(), dv_d.data(), q_d.data(), k_d.data(),
                              qr_d.data(), kr_d.data(), N, H, K, Vd);
  sync();
  expect_near(q_d.download(), q, "q");
  expect_near(k_d.download(), k, "k");
  expect_near(v_d.download(), v, "v");
  expect_near(qr_d.download(), qr, "q rstd");
  expect_near(kr_d.download(), kr, "k rstd");
  expect_near(beta_d.download(), beta, "beta");
  expect_near(g_d.download(), g, "g");
  expect_near(dbl_d.download(), dbl, "beta logit gradient");
  expect_near(du_d.download(), du, "decay logit gradient");
  expect_near(sums[0], dA, "dA_log");
  expect_near(sums[1], db, "ddt_bias");
  EXPECT_TRUE(bit_equal(sums[0], sums[2])) << "dA_log differs between two identical launches";
  EXPECT_TRUE(bit_equal(sums[1], sums[3])) << "ddt_bias differs between two identical launches";
  expect_near(dqkv_d.download(), dqkv, "dqkv");
}

}  // namespace
}  // namespace canonlab::test
