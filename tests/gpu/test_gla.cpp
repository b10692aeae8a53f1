// GLA on the GPU (gla/cuda.h) against the naive recurrence in double (gla/naive.h) on the same float inputs: lengths
// that are and are not multiples of the chunk, a chunk longer than the sequence, chunk 1, head dims off any tile,
// mild, wide and strong gates (−1280 accumulated over a chunk on half the channels); the same launches twice give
// the same bits; and the kernels agree with the same element kernels run on the host (what the CPU suite checks).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/ops/gla/cuda.h"
#include "engine/ops/gla/element_kernels.h"
#include "engine/ops/gla/naive.h"
#include "gla_cases.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct Outputs {
  std::vector<float> o, dq, dk, dv, dg;
};

// |got − want| <= 1e-4 (|want| + rms(want)): the CPU suite's rule for this op
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* name) {
  double ss = 0;
  for (double w : want) ss += w * w;
  const double rms = std::sqrt(ss / std::max<size_t>(1, want.size()));
  EXPECT_EQ(got.size(), want.size()) << name;
  const auto r = compare(got.data(), want.data(), std::min(got.size(), want.size()), 1e-4, 1e-4 * rms);
  EXPECT_TRUE(r.ok) << name << " " << r.message;
}
std::vector<double> wide(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

class GpuGla : public GpuTestWithParam<GlaCase> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const GlaCase& c = GetParam();
    nk_ = size_t(c.B) * c.Tn * c.H * c.K, nv_ = size_t(c.B) * c.Tn * c.H * c.V;
    GlaInputs<float> in(c, 0);
    q_ = std::move(in.q), k_ = std::move(in.k), v_ = std::move(in.v), g_ = std::move(in.g), dout_ = std::move(in.dout);
    scale_ = 1.0f / std::sqrt(float(c.K));
  }

  Outputs run_gpu() const {
    const GlaCase& c = GetParam();
    const auto q = to_device(q_), k = to_device(k_), v = to_device(v_), g = to_device(g_), dout = to_device(dout_);
    auto o = poisoned(nv_), dq = poisoned(nk_), dk = poisoned(nk_), dv = poisoned(nv_), dg = poisoned(nk_),
         states = poisoned(gla_states_size(c.B, c.Tn, c.H, c.K, c.V, c.chunk));
    const size_t bytes = std::max(cuda::gla_scratch_bytes(c.B, c.Tn, c.H, c.K, c.V, c.chunk, false),
                                  cuda::gla_scratch_bytes(c.B, c.Tn, c.H, c.K, c.V, c.chunk, true));
    cuda::DeviceBuffer<double> scratch(bytes / sizeof(double) + 1);
    scratch.fill_bytes(0xff);  // NaN: a kernel reading what none wrote shows
    cuda::gla_forward(stream(), o.data(), states.data(), q.data(), k.data(), v.data(), g.data(), c.B, c.Tn, c.H, c.K,
                      c.V, scale_, c.chunk, scratch.data());
    cuda::gla_backward(stream(), dq.data(), dk.data(), dv.data(), dg.data(), dout.data(), states.data(), q.data(),
                       k.data(), v.data(), g.data(), c.B, c.Tn, c.H, c.K, c.V, scale_, c.chunk, scratch.data());
    sync();
    return {o.download(), dq.download(), dk.download(), dv.download(), dg.download()};
  }

  size_t nk_ = 0, nv_ = 0;
  float scale_ = 1;
  std::vector<float> q_, k_, v_, g_, dout_;
};

TEST_P(GpuGla, MatchesNaiveAndRepeatsBitForBit) {
  const GlaCase& c = GetParam();
  const auto q = wide(q_), k = wide(k_), v = wide(v_), g = wide(g_), dout = wide(dout_);
  std::vector<double> o(nv_), dq(nk_), dk(nk_), dv(nv_), dg(nk_);
  gla_forward_naive(o.data(), q.data(), k.data(), v.data(), g.data(), c.B, c.Tn, c.H, c.K, c.V, double(scale_));
  gla_backward_naive(dq.data(), dk.data(), dv.data(), dg.data(), dout.data(), q.data(), k.data(), v.data(), g.data(),
                     c.B, c.Tn, c.H, c.K, c.V, double(scale_));
  const Outputs got = run_gpu();
  expect_close(got.o, o, "o");
  expect_close(got.dq, dq, "dq");
  expect_close(got.dk, dk, "dk");
  expect_close(got.dv, dv, "dv");
  expect_close(got.dg, dg, "dg");

  const Outputs again = run_gpu();
  EXPECT_TRUE(bit_equal(got.o, again.o)) << "o";
  EXPECT_TRUE(bit_equal(got.dq, again.dq)) << "dq";
  EXPECT_TRUE(bit_equal(got.dk, again.dk)) << "dk";
  EXPECT_TRUE(bit_equal(got.dv, again.dv)) << "dv";
  EXPECT_TRUE(bit_equal(got.dg, again.dg)) << "dg";
}

// The GPU runs element_kernels.h; on the host the same kernels give the same values up to the device's exp and
// fused multiply-adds.
TEST_P(GpuGla, MatchesTheSameElementKernelsOnTheHost) {
  const GlaCase& c = GetParam();
  Outputs host{std::vector<float>(nv_), std::vector<float>(nk_), std::vector<float>(nk_), std::vector<float>(nv_),
               std::vector<float>(nk_)};
  std::vector<float> states(gla_states_size(c.B, c.Tn, c.H, c.K, c.V, c.chunk));
  std::vector<double> scratch(gla_element_scratch_bytes<float>(c.B, c.Tn, c.H, c.K, c.V, c.chunk, true) / 8 + 1);
  gla_forward_elements(HostLaunch{}, scratch.data(), host.o.data(), states.data(), q_.data(), k_.data(), v_.data(),
                       g_.data(), c.B, c.Tn, c.H, c.K, c.V, scale_, c.chunk);
  gla_backward_elements(HostLaunch{}, scratch.data(), host.dq.data(), host.dk.data(), host.dv.data(), host.dg.data(),
                        dout_.data(), states.data(), q_.data(), k_.data(), v_.data(), g_.data(), c.B, c.Tn, c.H, c.K,
                        c.V, scale_, c.chunk);
  const Outputs got = run_gpu();
  expect_close(got.o, wide(host.o), "o");
  expect_close(got.dq, wide(host.dq), "dq");
  expect_close(got.dk, wide(host.dk), "dk");
  expect_close(got.dv, wide(host.dv), "dv");
  expect_close(got.dg, wide(host.dg), "dg");
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuGla,
                         ::testing::Values(GlaCase{2, 128, 2, 16, 32, 64, Gates::Mild},
                                           GlaCase{2, 150, 2, 32, 16, 64, Gates::Mild},
                                           GlaCase{2, 37, 2, 16, 32, 64, Gates::Wide},
                                           GlaCase{2, 23, 2, 8, 8, 1, Gates::Wide},
                                           GlaCase{2, 77, 2, 16, 24, 20, Gates::Wide},
                                           GlaCase{1, 50, 2, 3, 5, 32, Gates::Mild},
                                           GlaCase{1, 256, 2, 64, 128, 64, Gates::Mild},
                                           GlaCase{2, 200, 2, 16, 32, 64, Gates::Strong},
                                           GlaCase{1, 41, 2, 8, 8, 7, Gates::Strong}));

}  // namespace
}  // namespace canonlab::test
