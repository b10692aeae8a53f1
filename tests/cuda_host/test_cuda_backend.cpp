// CudaBackend's own code over the host stand-in of the CUDA layer: the backend's capability refusals, the stand-in's
// pointer checks and the step graph's capture rules. (Every model family against the CPU backend: test_cuda_parity.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/task.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_provider.h"
#include "host_cuda.h"
#include "models/language_model.h"
#include "train/step.h"

namespace canonlab {
namespace {

using HostBackend = CudaBackendT<HostCuda>;

// What the GPU has no kernel for is refused before the one parameter allocation, naming the setting.
TEST(CudaBackendOnHost, RefusesWhatItHasNoKernelFor) {
  const RunConfig naive = config_from_yaml_string(
      "{}", {"model.family=gla", "model.recurrent.kernel=naive", "model.d_model=32", "model.n_heads=2"});
  try {
    build_model<float>(naive.model, 1, make_cuda_backend({}));
    FAIL() << "the reference scans were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.recurrent.kernel: naive"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  const RunConfig wide = config_from_yaml_string("{}", {"model.d_model=256", "model.n_heads=1"});
  try {
    build_model<float>(wide.model, 1, make_cuda_backend({}));
    FAIL() << "a head dimension of 256 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dimension (model.d_model / model.n_heads) is 256"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("limit of 128"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda_host::live_device_bytes(), 0u) << "a refused model left device memory behind";
}

// The stand-in's device memory cannot be read by the host: a kernel given a host pointer, or a range past an
// allocation, is an Error naming the op and the argument.
TEST(CudaBackendOnHost, PointersAreCheckedAgainstTheirAllocations) {
  HostBackend be({});
  DeviceBuffer<float> x(be.memory(), 100), y(be.memory(), 100);
  std::vector<float> host(100, 1.f);
  EXPECT_THROW(be.add(y.data(), host.data(), x.data(), 100), Error);
  try {
    be.add(y.data(), x.data(), x.data(), 101);
    FAIL() << "an overrun was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_host: add: argument '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs past the end"), std::string::npos) << e.what();
  }
  be.fill_zero(x.data(), 100);
  be.add(y.data(), x.data(), x.data(), 100);
  EXPECT_EQ(y.download(), std::vector<float>(100, 0.f));
}

// A captured step replays: the work runs at launch, never at capture; host reads and allocations inside it are
// Errors, as on a GPU.
TEST(StepGraph, HostReadInCaptureThrows) {
  HostBackend be({});
  DeviceBuffer<float> x(be.memory(), 8);
  be.fill_zero(x.data(), 8);
  cuda_host::CudaGraph graph;
  float value = 0;
  EXPECT_THROW(graph.capture(be.stream(), [&] { be.memory().copy_to_host(&value, x.data(), sizeof value); }), Error);
  EXPECT_THROW(graph.capture(be.stream(), [&] { DeviceBuffer<float> more(be.memory(), 4); }), Error);
  EXPECT_THROW(graph.capture(be.stream(), [&] { be.synchronize(); }), Error);
  EXPECT_FALSE(graph.ready());
  // recorded, not run; then each launch runs it
  const std::vector<float> ones(8, 1.f);
  DeviceBuffer<float> one(be.memory(), std::span<const float>(ones));
  graph.capture(be.stream(), [&] { be.add_into(x.data(), one.data(), 8); });
  EXPECT_EQ(x.download(), std::vector<float>(8, 0.f));
  graph.launch(be.stream());
  graph.launch(be.stream());
  EXPECT_EQ(x.download(), std::vector<float>(8, 2.f));
}

}  // namespace
}  // namespace canonlab
