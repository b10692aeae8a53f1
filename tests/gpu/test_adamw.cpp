// The optimizer on the GPU against train/adamw.h: the squared gradient norm against a serial double sum, then
// clipping and AdamW bit for bit given the same norm (this binary is built without FMA contraction, so the CPU
// statements round exactly where the kernel's explicit roundings do); weight decay only where the mask says;
// a non-finite norm leaves everything untouched; the bf16 shadow is the rounded new parameters.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "engine/ops/adamw/adamw.h"
#include "engine/ops/adamw/cuda.h"
#include "engine/ops/elementwise/elementwise.h"
#include "gpu_test.h"
#include "train/adamw.h"

namespace canonlab::test {
namespace {

class GpuAdamW : public GpuTestWithParam<size_t> {};

TEST_P(GpuAdamW, NormClipAndUpdateMatchCpu) {
  const size_t n = GetParam();
  auto params = random_vector<float>(n, 1), grads = random_vector<float>(n, 2, -3, 3);
  const auto m0 = random_vector<float>(n, 3, -0.1, 0.1), v0 = random_vector<float>(n, 4, 0, 0.01);
  std::vector<uint8_t> decay(n);
  for (size_t i = 0; i < n; i++) decay[i] = uint8_t(i % 3 != 0);
  TrainConfig tc;
  tc.beta1 = 0.9;
  tc.beta2 = 0.95;
  tc.eps = 1e-8;
  tc.weight_decay = 0.1;
  const double lr = 3e-3, max_norm = 1.0;

  const auto g_d = to_device(grads);
  cuda::DeviceBuffer<double> sumsq_d(1), scratch(cuda::grad_norm_scratch_size());
  cuda::grad_sum_squares(stream(), sumsq_d.data(), g_d.data(), n, scratch.data());
  cuda::DeviceBuffer<double> sumsq2_d(1);  // again: the same bits
  cuda::grad_sum_squares(stream(), sumsq2_d.data(), g_d.data(), n, scratch.data());
  sync();
  const double sumsq = sumsq_d.download()[0];
  const double sumsq2 = sumsq2_d.download()[0];
  EXPECT_EQ(std::memcmp(&sumsq, &sumsq2, sizeof sumsq), 0) << "the squared norm differs between two launches";
  double serial = 0;
  for (float g : grads) serial += double(g) * double(g);
  EXPECT_NEAR(sumsq, serial, 1e-12 * serial);

  for (int64_t t : {int64_t(1), int64_t(2), int64_t(1000)}) {
    // CPU: clip with the GPU's norm, then adamw_step from state t - 1
    // (the CPU ops themselves, not CpuBackend: this binary links no CPU GEMM library, docs/gpu.md)
    std::vector<float> p_cpu = params, g_cpu = grads, m_cpu = m0, v_cpu = v0;
    const double coef = clip_coefficient(std::sqrt(sumsq), max_norm);
    if (coef < 1.0) canonlab::scale(g_cpu.data(), n, coef);
    canonlab::adamw_update(p_cpu.data(), g_cpu.data(), m_cpu.data(), v_cpu.data(), decay.data(), n,
                           adamw_coefficients(tc, t, lr));

    auto p_d = to_device(params), m_d = to_device(m0), v_d = to_device(v0), gc_d = to_device(grads);
    const auto decay_d = to_device(decay);
    const auto c_d = to_device(std::vector<AdamWCoefficients>{adamw_coefficients(tc, t, lr)});
    const auto running_d = to_device(std::vector<int32_t>{-1});
    cuda::DeviceBuffer<cuda::Bf16> shadow(n);
    cuda::clip_grad_norm(stream(), gc_d.data(), n, sumsq_d.data(), max_norm);
    cuda::adamw_update(stream(), p_d.data(), m_d.data(), v_d.data(), gc_d.data(), decay_d.data(), n, c_d.data(),
                       running_d.data(), shadow.data());
    sync();
    const auto p_gpu = p_d.download();
    EXPECT_TRUE(bit_equal(p_gpu, p_cpu)) << "params, t=" << t;
    EXPECT_TRUE(bit_equal(m_d.download(), m_cpu)) << "m, t=" << t;
    EXPECT_TRUE(bit_equal(v_d.download(), v_cpu)) << "v, t=" << t;
    const auto bits = shadow.download(), want = to_bf16_bits(p_gpu);
    EXPECT_EQ(0, std::memcmp(bits.data(), want.data(), n * sizeof(cuda::Bf16))) << "bf16 shadow, t=" << t;
  }

  // clip_grad_norm alone, as the CPU op
  std::vector<float> g_cpu = grads;
  const double coef = clip_coefficient(std::sqrt(sumsq), max_norm);
  if (coef < 1.0) canonlab::scale(g_cpu.data(), n, coef);
  auto gc_d = to_device(grads);
  cuda::clip_grad_norm(stream(), gc_d.data(), n, sumsq_d.data(), max_norm);
  sync();
  EXPECT_TRUE(bit_equal(gc_d.download(), g_cpu));
}

INSTANTIATE_TEST_SUITE_P(Sizes, GpuAdamW, ::testing::Values(size_t(1), size_t(1023), size_t(1025), size_t(300007)));

class GpuAdamWGuard : public GpuTest {};

// The step guard records the first step with a non-finite loss or norm; from then on AdamW changes nothing.
TEST_F(GpuAdamWGuard, NonFiniteNormHaltsAndUpdatesNothing) {
  const size_t n = 5000;
  auto grads = random_vector<float>(n, 5);
  grads[4321] = std::numeric_limits<float>::infinity();
  const auto params = random_vector<float>(n, 6), m0 = random_vector<float>(n, 7), v0 = random_vector<float>(n, 8, 0, 1);
  const auto g_d = to_device(grads);
  auto p_d = to_device(params), m_d = to_device(m0), v_d = to_device(v0);
  const auto decay_d = to_device(std::vector<uint8_t>(n, 1));
  cuda::DeviceBuffer<double> sumsq_d(1), scratch(cuda::grad_norm_scratch_size());
  TrainConfig tc;
  const auto c_d = to_device(std::vector<AdamWCoefficients>{adamw_coefficients(tc, 1, 1e-3)});
  auto halted_d = to_device(std::vector<int32_t>{-1});
  const auto step_d = to_device(std::vector<int32_t>{17});
  cuda::grad_sum_squares(stream(), sumsq_d.data(), g_d.data(), n, scratch.data());
  cuda::step_guard(stream(), halted_d.data(), step_d.data(), sumsq_d.data(), 1);
  cuda::adamw_update(stream(), p_d.data(), m_d.data(), v_d.data(), g_d.data(), decay_d.data(), n, c_d.data(),
                     halted_d.data(), nullptr);
  sync();
  EXPECT_FALSE(std::isfinite(sumsq_d.download()[0]));
  EXPECT_EQ(halted_d.download()[0], 17);
  EXPECT_TRUE(bit_equal(p_d.download(), params));
  EXPECT_TRUE(bit_equal(m_d.download(), m0));
  EXPECT_TRUE(bit_equal(v_d.download(), v0));
}

}  // namespace
}  // namespace canonlab::test
