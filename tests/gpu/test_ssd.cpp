// Mamba2's SSD scan on the GPU (ssd/cuda.h) against the naive recurrence in double (ssd/naive.h) on the same
// float inputs, over lengths that are and are not multiples of the chunk, a chunk longer than the sequence,
// chunk 1, grouped B/C and strongly decaying gates; the same launches twice give the same bits, forward and
// backward; and the kernels agree with the same element kernels run on the host (element_kernels.h, what the CPU suite checks).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/ops/ssd/cuda.h"
#include "engine/ops/ssd/naive.h"
#include "engine/ops/ssd/element_kernels.h"
#include "gpu_test.h"
#include "ssd_cases.h"

namespace canonlab::test {
namespace {

struct Outputs {
  std::vector<float> y, dx, ddt, dA, dB, dC;
};

// |got − want| <= rtol |want| + atol · max |want|: sums of many signed terms can be small where their parts are not
// (the CPU suite's rule for this op).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* name) {
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::abs(w));
  const auto r = compare(got.data(), want.data(), std::min(got.size(), want.size()), 1e-4, 1e-5 * scale);
  EXPECT_EQ(got.size(), want.size()) << name;
  EXPECT_TRUE(r.ok) << name << " " << r.message;
}

class GpuSsd : public GpuTestWithParam<SsdCase> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const SsdCase& c = GetParam();
    nx_ = size_t(c.B) * c.Tn * c.H * c.P, nt_ = size_t(c.B) * c.Tn * c.H, nb_ = size_t(c.B) * c.Tn * c.G * c.N;
    SsdData<float> in(c, 0);
    x_ = std::move(in.x), dt_ = std::move(in.dt), A_ = std::move(in.A), Bm_ = std::move(in.Bm), Cm_ = std::move(in.Cm);
    dy_ = std::move(in.dy);
  }

  Outputs run_gpu() const {
    const SsdCase& c = GetParam();
    const auto x = to_device(x_), dt = to_device(dt_), A = to_device(A_), Bm = to_device(Bm_), Cm = to_device(Cm_),
               dy = to_device(dy_);
    auto y = poisoned(nx_), dx = poisoned(nx_), ddt = poisoned(nt_), dA = poisoned(c.H), dB = poisoned(nb_),
         dC = poisoned(nb_), states = poisoned(ssd_states_size(c.B, c.Tn, c.H, c.P, c.N, c.chunk));
    const size_t bytes = std::max(cuda::ssd_scratch_bytes(c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk, false),
                                  cuda::ssd_scratch_bytes(c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk, true));
    cuda::DeviceBuffer<double> scratch(bytes / sizeof(double) + 1);
    scratch.fill_bytes(0xff);  // NaN: a kernel reading what none wrote shows
    cuda::ssd_forward(stream(), y.data(), states.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), c.B,
                      c.Tn, c.H, c.P, c.G, c.N, c.chunk, scratch.data());
    cuda::ssd_backward(stream(), dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(), dy.data(), states.data(),
                       x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk,
                       scratch.data());
    sync();
    return {y.download(), dx.download(), ddt.download(), dA.download(), dB.download(), dC.download()};
  }

  size_t nx_ = 0, nt_ = 0, nb_ = 0;
  std::vector<float> x_, dt_, A_, Bm_, Cm_, dy_;
};

TEST_P(GpuSsd, MatchesNaiveAndRepeatsBitForBit) {
  const SsdCase& c = GetParam();
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const auto x = wide(x_), dt = wide(dt_), A = wide(A_), Bm = wide(Bm_), Cm = wide(Cm_), dy = wide(dy_);
  std::vector<double> y(nx_), dx(nx_), ddt(nt_), dA(c.H), dB(nb_), dC(nb_);
  ssd_forward_naive(y.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), c.B, c.Tn, c.H, c.P, c.G, c.N);
  ssd_backward_naive(dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(), dy.data(), x.data(), dt.data(), A.data(),
                     Bm.data(), Cm.data(), c.B, c.Tn, c.H, c.P, c.G, c.N);
  const Outputs got = run_gpu();
  expect_close(got.y, y, "y");
  expect_close(got.dx, dx, "dx");
  expect_close(got.ddt, ddt, "ddt");
  expect_close(got.dA, dA, "dA");
  expect_close(got.dB, dB, "dB");
  expect_close(got.dC, dC, "dC");

  const Outputs again = run_gpu();
  EXPECT_TRUE(bit_equal(got.y, again.y)) << "y";
  EXPECT_TRUE(bit_equal(got.dx, again.dx)) << "dx";
  EXPECT_TRUE(bit_equal(got.ddt, again.ddt)) << "ddt";
  EXPECT_TRUE(bit_equal(got.dA, again.dA)) << "dA";
  EXPECT_TRUE(bit_equal(got.dB, again.dB)) << "dB";
  EXPECT_TRUE(bit_equal(got.dC, again.dC)) << "dC";
}

// The GPU runs element_kernels.h; on the host the same kernels give the same values up to the device's exp and
// fused multiply-adds.
TEST_P(GpuSsd, MatchesTheSameElementKernelsOnTheHost) {
  const SsdCase& c = GetParam();
  Outputs host{std::vector<float>(nx_), std::vector<float>(nx_), std::vector<float>(nt_), std::vector<float>(c.H),
               std::vector<float>(nb_), std::vector<float>(nb_)};
  std::vector<float> states(ssd_states_size(c.B, c.Tn, c.H, c.P, c.N, c.chunk));
  std::vector<double> scratch(ssd_element_scratch_bytes<float>(c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk, true) / 8 + 1);
  ssd_forward_elements(HostLaunch{}, scratch.data(), host.y.data(), states.data(), x_.data(), dt_.data(), A_.data(),
                       Bm_.data(), Cm_.data(), c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk);
  ssd_backward_elements(HostLaunch{}, scratch.data(), host.dx.data(), host.ddt.data(), host.dA.data(),
                        host.dB.data(), host.dC.data(), dy_.data(), states.data(), x_.data(), dt_.data(), A_.data(),
                        Bm_.data(), Cm_.data(), c.B, c.Tn, c.H, c.P, c.G, c.N, c.chunk);
  const Outputs got = run_gpu();
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  expect_close(got.y, wide(host.y), "y");
  expect_close(got.dx, wide(host.dx), "dx");
  expect_close(got.ddt, wide(host.ddt), "ddt");
  expect_close(got.dA, wide(host.dA), "dA");
  expect_close(got.dB, wide(host.dB), "dB");
  expect_close(got.dC, wide(host.dC), "dC");
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuSsd,
                         ::testing::Values(SsdCase{2, 64, 4, 8, 1, 8, 16}, SsdCase{2, 37, 4, 8, 2, 8, 16},
                                           SsdCase{2, 10, 4, 8, 1, 8, 16}, SsdCase{1, 13, 2, 4, 1, 4, 1},
                                           SsdCase{2, 1, 4, 8, 2, 8, 16}, SsdCase{1, 29, 4, 8, 2, 6, 7},
                                           SsdCase{2, 150, 4, 32, 1, 16, 64}, SsdCase{1, 200, 3, 64, 1, 128, 64},
                                           SsdCase{2, 150, 4, 8, 2, 8, 64, -16, -16, 0.9, 1.1},
                                           SsdCase{2, 70, 4, 8, 1, 8, 32, -16, -1, 1e-3, 2.0}));

}  // namespace
}  // namespace canonlab::test
