// The decoding steps of the linear families as element kernels (the GPU's, run on the host) against the CPU step
// functions they batch (ssd_step, gla_step, delta_rule_step): several sequences over several tokens, the states
// carried from token to token, bit for bit (the same double arithmetic in the same order per element).
#include <gtest/gtest.h>

#include <vector>

#include "engine/ops/delta_rule/element_kernels.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/gla/element_kernels.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/ssd/element_kernels.h"
#include "engine/ops/ssd/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::random_vector;

constexpr int kSequences = 3, kTokens = 9;

template <class T>
void check_ssd() {
  const int H = 4, P = 5, G = 2, N = 6;
  std::vector<T> state_w(size_t(kSequences) * H * P * N, T(0)), state_g = state_w;
  const auto A = random_vector<T>(H, 1, -2, -0.5);
  for (int t = 0; t < kTokens; t++) {
    const auto x = random_vector<T>(size_t(kSequences) * H * P, 10 + t), dt = random_vector<T>(size_t(kSequences) * H, 30 + t, 0.05, 1);
    const auto B = random_vector<T>(size_t(kSequences) * G * N, 50 + t), C = random_vector<T>(size_t(kSequences) * G * N, 70 + t);
    std::vector<T> y_w(x.size()), y_g(x.size(), T(7));
    for (int b = 0; b < kSequences; b++)
      ssd_step(y_w.data() + size_t(b) * H * P, state_w.data() + size_t(b) * H * P * N, x.data() + size_t(b) * H * P,
               dt.data() + size_t(b) * H, A.data(), B.data() + size_t(b) * G * N, C.data() + size_t(b) * G * N, H, P, G,
               N);
    ssd_step_elements(HostLaunch{}, y_g.data(), state_g.data(), x.data(), dt.data(), A.data(), B.data(), C.data(),
                      kSequences, H, P, G, N);
    EXPECT_EQ(y_g, y_w) << "token " << t;
    EXPECT_EQ(state_g, state_w) << "token " << t;
  }
}

template <class T>
void check_gla() {
  const int H = 3, K = 6, V = 7;
  std::vector<T> state_w(size_t(kSequences) * H * K * V, T(0)), state_g = state_w;
  for (int t = 0; t < kTokens; t++) {
    const size_t nk = size_t(kSequences) * H * K, nv = size_t(kSequences) * H * V;
    const auto q = random_vector<T>(nk, 10 + t), k = random_vector<T>(nk, 30 + t), v = random_vector<T>(nv, 50 + t);
    const auto g = random_vector<T>(nk, 70 + t, -2, 0);
    std::vector<T> o_w(nv), o_g(nv, T(7));
    for (int b = 0; b < kSequences; b++)
      gla_step(o_w.data() + size_t(b) * H * V, state_w.data() + size_t(b) * H * K * V, q.data() + size_t(b) * H * K,
               k.data() + size_t(b) * H * K, v.data() + size_t(b) * H * V, g.data() + size_t(b) * H * K, H, K, V, T(0.4));
    gla_step_elements(HostLaunch{}, o_g.data(), state_g.data(), q.data(), k.data(), v.data(), g.data(), kSequences, H,
                      K, V, T(0.4));
    EXPECT_EQ(o_g, o_w) << "token " << t;
    EXPECT_EQ(state_g, state_w) << "token " << t;
  }
}

template <class T>
void check_delta(bool gated) {
  const int H = 3, K = 6, V = 5;
  std::vector<T> state_w(size_t(kSequences) * H * K * V, T(0)), state_g = state_w;
  for (int t = 0; t < kTokens; t++) {
    const size_t nk = size_t(kSequences) * H * K, nv = size_t(kSequences) * H * V, nh = size_t(kSequences) * H;
    const auto q = random_vector<T>(nk, 10 + t), k = random_vector<T>(nk, 30 + t), v = random_vector<T>(nv, 50 + t);
    const auto beta = random_vector<T>(nh, 70 + t, 0.05, 0.95), g = random_vector<T>(nh, 90 + t, -1, 0);
    std::vector<T> o_w(nv), o_g(nv, T(7));
    for (int b = 0; b < kSequences; b++)
      delta_rule_step(o_w.data() + size_t(b) * H * V, state_w.data() + size_t(b) * H * K * V,
                      q.data() + size_t(b) * H * K, k.data() + size_t(b) * H * K, v.data() + size_t(b) * H * V,
                      beta.data() + size_t(b) * H, gated ? g.data() + size_t(b) * H : nullptr, H, K, V, T(0.4));
    delta_rule_step_elements(HostLaunch{}, o_g.data(), state_g.data(), q.data(), k.data(), v.data(), beta.data(),
                             gated ? g.data() : nullptr, kSequences, H, K, V, T(0.4));
    EXPECT_EQ(o_g, o_w) << "token " << t;
    EXPECT_EQ(state_g, state_w) << "token " << t;
  }
}

TEST(OpsDecodeElements, SsdStepBatchesTheCpuStepBitForBit) {
  check_ssd<float>();
  check_ssd<double>();
}

TEST(OpsDecodeElements, GlaStepBatchesTheCpuStepBitForBit) {
  check_gla<float>();
  check_gla<double>();
}

TEST(OpsDecodeElements, DeltaRuleStepBatchesTheCpuStepBitForBit) {
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "DeltaNet");
    check_delta<float>(gated);
    check_delta<double>(gated);
  }
}

}  // namespace
}  // namespace canonlab
