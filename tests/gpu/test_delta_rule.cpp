// The (gated) delta rule on the GPU (delta_rule/cuda.h) against the naive recurrence in double (delta_rule/naive.h)
// on the same float inputs: lengths that are and are not multiples of the chunk, a chunk longer than the sequence,
// chunk 1, K != V (GDN's expand_v), a strongly decaying gate (about −30 per step) and DeltaNet (no gate); the same
// launches twice give the same bits; and the kernels agree with the same element kernels run on the host (what the
// CPU suite checks).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/ops/delta_rule/cuda.h"
#include "engine/ops/delta_rule/element_kernels.h"
#include "engine/ops/delta_rule/naive.h"
#include "delta_rule_cases.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct Outputs {
  std::vector<float> o, dq, dk, dv, dbeta, dg;
};

// fp32 against the double reference, values O(1): the CPU suite's tolerance for the chunked form
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* name) {
  EXPECT_EQ(got.size(), want.size()) << name;
  const auto r = compare(got.data(), want.data(), std::min(got.size(), want.size()), 1e-4, 1e-5);
  EXPECT_TRUE(r.ok) << name << " " << r.message;
}
std::vector<double> wide(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

class GpuDeltaRule : public GpuTestWithParam<DeltaCase> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const DeltaCase& c = GetParam();
    nt_ = size_t(c.B) * c.Tn * c.H;
    DeltaInputs<float> in = make_delta_inputs<float>(c.B, c.Tn, c.H, c.K, c.V, c.gate, 100);
    q_ = std::move(in.q), k_ = std::move(in.k), v_ = std::move(in.v), beta_ = std::move(in.beta);
    g_ = std::move(in.g), dout_ = std::move(in.dout);
    scale_ = 1.0f / std::sqrt(float(c.K));
  }
  bool gated() const { return !g_.empty(); }

  Outputs run_gpu() const {
    const DeltaCase& c = GetParam();
    const auto q = to_device(q_), k = to_device(k_), v = to_device(v_), beta = to_device(beta_),
               dout = to_device(dout_);
    const auto g = to_device(gated() ? g_ : std::vector<float>(1));
    const float* gp = gated() ? g.data() : nullptr;
    auto o = poisoned(nt_ * c.V), dq = poisoned(nt_ * c.K), dk = poisoned(nt_ * c.K), dv = poisoned(nt_ * c.V),
         dbeta = poisoned(nt_), dg = poisoned(gated() ? nt_ : 1),
         states = poisoned(delta_rule_states_size(c.B, c.Tn, c.H, c.K, c.V, c.chunk));
    const size_t bytes = std::max(cuda::delta_rule_scratch_bytes(c.B, c.Tn, c.H, c.K, c.V, c.chunk, false),
                                  cuda::delta_rule_scratch_bytes(c.B, c.Tn, c.H, c.K, c.V, c.chunk, true));
    cuda::DeviceBuffer<double> scratch(bytes / sizeof(double) + 1);
    scratch.fill_bytes(0xff);  // NaN: a kernel reading what none wrote shows
    cuda::delta_rule_forward(stream(), o.data(), states.data(), q.data(), k.data(), v.data(), beta.data(), gp, c.B,
                             c.Tn, c.H, c.K, c.V, scale_, c.chunk, scratch.data());
    cuda::delta_rule_backward(stream(), dq.data(), dk.data(), dv.data(), dbeta.data(), gated() ? dg.data() : nullptr,
                              dout.data(), states.data(), q.data(), k.data(), v.data(), beta.data(), gp, c.B, c.Tn,
                              c.H, c.K, c.V, scale_, c.chunk, scratch.data());
    sync();
    Outputs out{o.download(), dq.download(), dk.download(), dv.download(), dbeta.download(), {}};
    if (gated()) out.dg = dg.download();
    return out;
  }

  size_t nt_ = 0;
  float scale_ = 1;
  std::vector<float> q_, k_, v_, beta_, g_, dout_;
};

TEST_P(GpuDeltaRule, MatchesNaiveAndRepeatsBitForBit) {
  const DeltaCase& c = GetParam();
  const auto q = wide(q_), k = wide(k_), v = wide(v_), beta = wide(beta_), g = wide(g_), dout = wide(dout_);
  const double* gp = gated() ? g.data() : nullptr;
  std::vector<double> o(nt_ * c.V), dq(nt_ * c.K), dk(nt_ * c.K), dv(nt_ * c.V), dbeta(nt_), dg(gated() ? nt_ : 0);
  delta_rule_forward_naive(o.data(), q.data(), k.data(), v.data(), beta.data(), gp, c.B, c.Tn, c.H, c.K, c.V,
                           double(scale_));
  delta_rule_backward_naive(dq.data(), dk.data(), dv.data(), dbeta.data(), gated() ? dg.data() : nullptr, dout.data(),
                            q.data(), k.data(), v.data(), beta.data(), gp, c.B, c.Tn, c.H, c.K, c.V, double(scale_));
  const Outputs got = run_gpu();
  expect_close(got.o, o, "o");
  expect_close(got.dq, dq, "dq");
  expect_close(got.dk, dk, "dk");
  expect_close(got.dv, dv, "dv");
  expect_close(got.dbeta, dbeta, "dbeta");
  expect_close(got.dg, dg, "dg");

  const Outputs again = run_gpu();
  EXPECT_TRUE(bit_equal(got.o, again.o)) << "o";
  EXPECT_TRUE(bit_equal(got.dq, again.dq)) << "dq";
  EXPECT_TRUE(bit_equal(got.dk, again.dk)) << "dk";
  EXPECT_TRUE(bit_equal(got.dv, again.dv)) << "dv";
  EXPECT_TRUE(bit_equal(got.dbeta, again.dbeta)) << "dbeta";
  EXPECT_TRUE(bit_equal(got.dg, again.dg)) << "dg";
}

// The GPU runs element_kernels.h; on the host the same kernels give the same values up to the device's exp and
// fused multiply-adds.
TEST_P(GpuDeltaRule, MatchesTheSameElementKernelsOnTheHost) {
  const DeltaCase& c = GetParam();
  Outputs host{std::vector<float>(nt_ * c.V), std::vector<float>(nt_ * c.K), std::vector<float>(nt_ * c.K),
               std::vector<float>(nt_ * c.V), std::vector<float>(nt_), std::vector<float>(gated() ? nt_ : 0)};
  std::vector<float> states(delta_rule_states_size(c.B, c.Tn, c.H, c.K, c.V, c.chunk));
  std::vector<double> scratch(delta_rule_element_scratch_bytes<float>(c.B, c.Tn, c.H, c.K, c.V, c.chunk, true) / 8 + 1);
  const float* gp = gated() ? g_.data() : nullptr;
  delta_rule_forward_elements(HostLaunch{}, scratch.data(), host.o.data(), states.data(), q_.data(), k_.data(),
                              v_.data(), beta_.data(), gp, c.B, c.Tn, c.H, c.K, c.V, scale_, c.chunk);
  delta_rule_backward_elements(HostLaunch{}, scratch.data(), host.dq.data(), host.dk.data(), host.dv.data(),
                               host.dbeta.data(), gated() ? host.dg.data() : nullptr, dout_.data(), states.data(),
                               q_.data(), k_.data(), v_.data(), beta_.data(), gp, c.B, c.Tn, c.H, c.K, c.V, scale_,
                               c.chunk);
  const Outputs got = run_gpu();
  expect_close(got.o, wide(host.o), "o");
  expect_close(got.dq, wide(host.dq), "dq");
  expect_close(got.dk, wide(host.dk), "dk");
  expect_close(got.dv, wide(host.dv), "dv");
  expect_close(got.dbeta, wide(host.dbeta), "dbeta");
  expect_close(got.dg, wide(host.dg), "dg");
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuDeltaRule,
                         ::testing::Values(DeltaCase{2, 64, 2, 16, 16, 16, Gate::kMild},
                                           DeltaCase{2, 37, 2, 16, 16, 64, Gate::kMild},
                                           DeltaCase{2, 9, 3, 8, 8, 1, Gate::kMild},
                                           DeltaCase{1, 200, 4, 32, 32, 64, Gate::kMild},
                                           DeltaCase{2, 45, 2, 12, 20, 16, Gate::kMild},
                                           DeltaCase{1, 40, 2, 32, 64, 16, Gate::kMild},
                                           DeltaCase{1, 150, 2, 16, 24, 64, Gate::kStrong},
                                           DeltaCase{2, 37, 2, 16, 16, 16, Gate::kNone},
                                           DeltaCase{1, 200, 2, 32, 32, 64, Gate::kNone}));

}  // namespace
}  // namespace canonlab::test
