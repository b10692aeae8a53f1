// CUDA graphs (engine/cuda/graph.h): a tiny training step (linear → GELU → loss gradient → linear backward → global
// norm → clipped AdamW) captured once and replayed, against the same step run eagerly, bit for bit over several
// steps with a changing learning rate (passed through device memory as the trainer will); what a capture refuses
// (a host synchronisation, an allocation by Gemm::ones) comes back as an Error and leaves the stream usable.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/graph.h"
#include "engine/ops/activation/cuda.h"
#include "engine/ops/adamw/cuda.h"
#include "engine/ops/elementwise/cuda.h"
#include "engine/ops/linear/cuda.h"
#include "gpu_test.h"
#include "train/adamw.h"

namespace canonlab::test {
namespace {

// Device state of a 2-layer MLP regression y = W2 gelu(W1 x), loss gradient dy = y − target.
struct TinyStep {
  static constexpr int N = 96, IN = 40, HID = 72, OUT = 24;
  static constexpr size_t kW1 = size_t(HID) * IN, kW2 = size_t(OUT) * HID, kParams = kW1 + kW2;
  cuda::DeviceBuffer<float> params, grads, m, v, x, target, h, a, y, dy, da, dh;
  cuda::DeviceBuffer<uint8_t> decay;
  cuda::DeviceBuffer<double> sumsq, scratch;
  cuda::DeviceBuffer<AdamWCoefficients> step;
  cuda::DeviceBuffer<int32_t> halted_at;

  TinyStep()
      : params(to_device(random_vector<float>(kParams, 1, -0.2, 0.2))), grads(kParams), m(kParams), v(kParams),
        x(to_device(random_vector<float>(size_t(N) * IN, 2))), target(to_device(random_vector<float>(size_t(N) * OUT, 3))),
        h(size_t(N) * HID), a(size_t(N) * HID), y(size_t(N) * OUT), dy(size_t(N) * OUT), da(size_t(N) * HID),
        dh(size_t(N) * HID), decay(to_device(std::vector<uint8_t>(kParams, 1))), sumsq(1),
        scratch(cuda::grad_norm_scratch_size()), step(1), halted_at(1) {
    m.fill_bytes(0);
    v.fill_bytes(0);
    halted_at.fill_bytes(0xff);  // -1: running
  }

  // everything a training step enqueues; no allocation, no host synchronisation
  void run(cuda::Gemm& gemm) {
    const cuda::CudaStream s = gemm.stream();
    float* w1 = params.data();
    float* w2 = params.data() + kW1;
    cuda::fill_zero(s, grads.data(), kParams);
    cuda::linear_forward(gemm, h.data(), HID, x.data(), IN, w1, nullptr, N, IN, HID);
    cuda::gelu_forward(s, a.data(), h.data(), a.size());
    cuda::linear_forward(gemm, y.data(), OUT, a.data(), HID, w2, nullptr, N, HID, OUT);
    cuda::scale(s, dy.data(), target.data(), -1.f, dy.size());
    cuda::add_into(s, dy.data(), y.data(), dy.size());
    cuda::linear_backward(gemm, da.data(), HID, grads.data() + kW1, nullptr, dy.data(), OUT, a.data(), HID, w2, N, HID,
                          OUT);
    cuda::gelu_backward(s, dh.data(), da.data(), h.data(), dh.size());
    cuda::linear_backward(gemm, nullptr, IN, grads.data(), nullptr, dh.data(), HID, x.data(), IN, w1, N, IN, HID);
    cuda::grad_sum_squares(s, sumsq.data(), grads.data(), kParams, scratch.data());
    cuda::clip_grad_norm(s, grads.data(), kParams, sumsq.data(), 0.5);
    cuda::adamw_update(s, params.data(), m.data(), v.data(), grads.data(), decay.data(), kParams, step.data(),
                       halted_at.data(), nullptr);
  }
  void set_step(cuda::CudaStream s, int64_t t, AdamWCoefficients* pinned) {
    TrainConfig tc;
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-8, tc.weight_decay = 0.1;
    *pinned = adamw_coefficients(tc, t, 1e-2 / double(t));
    CANONLAB_CUDA_CHECK(cudaMemcpyAsync(step.data(), pinned, sizeof(AdamWCoefficients), cudaMemcpyHostToDevice, s));
  }
};

class GpuGraph : public GpuTest {};

TEST_F(GpuGraph, ReplayedStepMatchesEagerStepBitForBit) {
  constexpr int kSteps = 5;
  AdamWCoefficients* pinned = nullptr;
  CANONLAB_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(AdamWCoefficients)));

  TinyStep eager;
  cuda::Gemm gemm_eager(stream());
  for (int t = 1; t <= kSteps; t++) {
    eager.set_step(stream(), t, pinned);
    eager.run(gemm_eager);
    sync();  // pinned is rewritten next step
  }

  TinyStep graphed;
  cuda::Gemm gemm_graph(stream());
  // a first eager step chooses every GEMM algorithm, as the trainer's first step will
  graphed.set_step(stream(), 1, pinned);
  graphed.run(gemm_graph);
  sync();
  cuda::CudaGraph graph;
  graph.capture(stream(), [&] { graphed.run(gemm_graph); });
  ASSERT_TRUE(graph.ready());
  EXPECT_GE(graph.node_count(), 10u);
  for (int t = 2; t <= kSteps; t++) {
    graphed.set_step(stream(), t, pinned);
    graph.launch(stream());
    sync();
  }
  EXPECT_TRUE(bit_equal(graphed.params.download(), eager.params.download())) << "parameters after " << kSteps;
  EXPECT_TRUE(bit_equal(graphed.m.download(), eager.m.download()));
  EXPECT_TRUE(bit_equal(graphed.v.download(), eager.v.download()));
  cudaFreeHost(pinned);
}

TEST_F(GpuGraph, RefusedCallsBecomeErrorsAndTheStreamStaysUsable) {
  cuda::CudaGraph graph;
  cuda::DeviceBuffer<float> x(1000);
  EXPECT_THROW(graph.capture(stream(), [&] {
    cuda::fill_zero(stream(), x.data(), x.size());
    sync();  // a host synchronisation inside a capture
  }),
               Error);
  EXPECT_FALSE(graph.ready());
  cuda::Gemm gemm(stream());
  EXPECT_THROW(graph.capture(stream(), [&] { gemm.ones(1 << 20); }), Error);
  // the stream still works
  cuda::fill_zero(stream(), x.data(), x.size());
  sync();
  EXPECT_TRUE(bit_equal(x.download(), std::vector<float>(1000, 0.f)));
}

}  // namespace
}  // namespace canonlab::test
