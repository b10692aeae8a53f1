// The linear families' decoding steps on the GPU (ssd_step, gla_step, delta_rule_step of their cuda.h) against the
// CPU step functions, several sequences over several tokens with the states carried on the device; the same tokens
// again from the same start give the same bits.
#include <vector>

#include "engine/ops/delta_rule/cuda.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/gla/cuda.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/ssd/cuda.h"
#include "engine/ops/ssd/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

constexpr int kSequences = 3, kTokens = 9;

class GpuDecode : public GpuTest {
 protected:
  // each step's output against the CPU's (double inside both; the device's exp may differ in the last double bit)
  static void expect_step(const std::vector<float>& got, const std::vector<float>& want, const char* what, int t) {
    const auto r = compare_with(got, want, kElementwise);
    EXPECT_TRUE(r.ok) << what << " token " << t << " " << r.message;
  }
};

TEST_F(GpuDecode, SsdStep) {
  const int H = 4, P = 16, G = 2, N = 8;
  const auto A = random_vector<float>(H, 1, -2, -0.5);
  const auto A_d = to_device(A);
  std::vector<float> state(size_t(kSequences) * H * P * N, 0.0f);
  std::vector<std::vector<float>> outputs[2];
  for (int rep = 0; rep < 2; rep++) {
    auto state_d = to_device(std::vector<float>(state.size(), 0.0f));
    for (int t = 0; t < kTokens; t++) {
      const auto x = random_vector<float>(size_t(kSequences) * H * P, 10 + t),
                 dt = random_vector<float>(size_t(kSequences) * H, 30 + t, 0.05, 1),
                 B = random_vector<float>(size_t(kSequences) * G * N, 50 + t),
                 C = random_vector<float>(size_t(kSequences) * G * N, 70 + t);
      const auto x_d = to_device(x), dt_d = to_device(dt), B_d = to_device(B), C_d = to_device(C);
      auto y_d = poisoned(x.size());
      cuda::ssd_step(stream(), y_d.data(), state_d.data(), x_d.data(), dt_d.data(), A_d.data(), B_d.data(), C_d.data(),
                     kSequences, H, P, G, N);
      sync();
      outputs[rep].push_back(y_d.download());
      if (rep == 0) {
        std::vector<float> y(x.size());
        for (int b = 0; b < kSequences; b++)
          ssd_step(y.data() + size_t(b) * H * P, state.data() + size_t(b) * H * P * N, x.data() + size_t(b) * H * P,
                   dt.data() + size_t(b) * H, A.data(), B.data() + size_t(b) * G * N, C.data() + size_t(b) * G * N, H,
                   P, G, N);
        expect_step(outputs[0].back(), y, "y", t);
      }
    }
    if (rep == 0) expect_step(state_d.download(), state, "state", kTokens);
  }
  for (int t = 0; t < kTokens; t++) EXPECT_TRUE(bit_equal(outputs[0][t], outputs[1][t])) << "token " << t;
}

TEST_F(GpuDecode, GlaStep) {
  const int H = 3, K = 16, V = 24;
  const size_t nk = size_t(kSequences) * H * K, nv = size_t(kSequences) * H * V;
  std::vector<float> state(size_t(kSequences) * H * K * V, 0.0f);
  std::vector<std::vector<float>> outputs[2];
  for (int rep = 0; rep < 2; rep++) {
    auto state_d = to_device(std::vector<float>(state.size(), 0.0f));
    for (int t = 0; t < kTokens; t++) {
      const auto q = random_vector<float>(nk, 10 + t), k = random_vector<float>(nk, 30 + t),
                 v = random_vector<float>(nv, 50 + t), g = random_vector<float>(nk, 70 + t, -2, 0);
      const auto q_d = to_device(q), k_d = to_device(k), v_d = to_device(v), g_d = to_device(g);
      auto o_d = poisoned(nv);
      cuda::gla_step(stream(), o_d.data(), state_d.data(), q_d.data(), k_d.data(), v_d.data(), g_d.data(), kSequences,
                     H, K, V, 0.25f);
      sync();
      outputs[rep].push_back(o_d.download());
      if (rep == 0) {
        std::vector<float> o(nv);
        for (int b = 0; b < kSequences; b++)
          gla_step(o.data() + size_t(b) * H * V, state.data() + size_t(b) * H * K * V, q.data() + size_t(b) * H * K,
                   k.data() + size_t(b) * H * K, v.data() + size_t(b) * H * V, g.data() + size_t(b) * H * K, H, K, V,
                   0.25f);
        expect_step(outputs[0].back(), o, "o", t);
      }
    }
    if (rep == 0) expect_step(state_d.download(), state, "state", kTokens);
  }
  for (int t = 0; t < kTokens; t++) EXPECT_TRUE(bit_equal(outputs[0][t], outputs[1][t])) << "token " << t;
}

TEST_F(GpuDecode, DeltaRuleStepWithAndWithoutGate) {
  const int H = 3, K = 16, V = 20;
  const size_t nk = size_t(kSequences) * H * K, nv = size_t(kSequences) * H * V, nh = size_t(kSequences) * H;
  for (bool gated : {false, true}) {
    SCOPED_TRACE(gated ? "gated" : "DeltaNet");
    std::vector<float> state(size_t(kSequences) * H * K * V, 0.0f);
    std::vector<std::vector<float>> outputs[2];
    for (int rep = 0; rep < 2; rep++) {
      auto state_d = to_device(std::vector<float>(state.size(), 0.0f));
      for (int t = 0; t < kTokens; t++) {
        const auto q = random_vector<float>(nk, 10 + t), k = random_vector<float>(nk, 30 + t),
                   v = random_vector<float>(nv, 50 + t), beta = random_vector<float>(nh, 70 + t, 0.05, 0.95),
                   g = random_vector<float>(nh, 90 + t, -1, 0);
        const auto q_d = to_device(q), k_d = to_device(k), v_d = to_device(v), beta_d = to_device(beta),
                   g_d = to_device(g);
        auto o_d = poisoned(nv);
        cuda::delta_rule_step(stream(), o_d.data(), state_d.data(), q_d.data(), k_d.data(), v_d.data(), beta_d.data(),
                              gated ? g_d.data() : nullptr, kSequences, H, K, V, 0.25f);
        sync();
        outputs[rep].push_back(o_d.download());
        if (rep == 0) {
          std::vector<float> o(nv);
          for (int b = 0; b < kSequences; b++)
            delta_rule_step(o.data() + size_t(b) * H * V, state.data() + size_t(b) * H * K * V,
                            q.data() + size_t(b) * H * K, k.data() + size_t(b) * H * K, v.data() + size_t(b) * H * V,
                            beta.data() + size_t(b) * H, gated ? g.data() + size_t(b) * H : nullptr, H, K, V, 0.25f);
          expect_step(outputs[0].back(), o, "o", t);
        }
      }
      if (rep == 0) expect_step(state_d.download(), state, "state", kTokens);
    }
    for (int t = 0; t < kTokens; t++) EXPECT_TRUE(bit_equal(outputs[0][t], outputs[1][t])) << "token " << t;
  }
}

}  // namespace
}  // namespace canonlab::test
