// CudaBackendT over the GPU's layer: the one translation unit that instantiates it, in builds with the CUDA kernels
// (the library canonlab_cuda_backend; plain C++ all the same).
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_provider.h"
#include "engine/cuda/buffer.h"
#include "engine/cuda/real_cuda.h"

namespace canonlab {

template class CudaBackendT<RealCuda>;

std::string cuda_backend_kind() { return "cuda"; }

std::string cuda_unavailable(int index) {
  const int n = cuda::device_count();
  if (n == 0) return "needs a GPU; this machine has no CUDA device (" + cuda::no_device_reason() + ")";
  if (index >= n)
    return "names a GPU this machine lacks: it has " + std::to_string(n) + " (cuda:0" +
           (n > 1 ? " .. cuda:" + std::to_string(n - 1) : std::string()) + ")";
  return "";
}

namespace {
// TFLOP/s of a 4096^3 GEMM of `input` through cuBLASLt (the engine's own Gemm): the best of 10 after a warm-up.
double gemm_tflops(cuda::GemmInput input) {
  constexpr int n = 4096;
  const size_t elements = size_t(n) * n;
  const size_t in_bytes = input == cuda::GemmInput::bf16 ? 2 : 4;
  cuda::DeviceBuffer<std::byte> a(elements * in_bytes), b(elements * in_bytes);
  cuda::DeviceBuffer<float> c(elements);
  a.fill_zero(), b.fill_zero();
  cuda::Stream stream;
  cuda::Gemm gemm(stream.get());
  cuda::EventTimer timer;
  double best_ms = 1e30;
  for (int i = 0; i < 11; i++) {
    timer.start(stream.get());
    gemm.run(false, true, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n, input);
    const double ms = timer.stop(stream.get());
    if (i > 0) best_ms = std::min(best_ms, ms);
  }
  return 2.0 * n * n * n / (best_ms * 1e-3) / 1e12;
}
}  // namespace

std::optional<CudaDeviceFacts> cuda_device_facts(int index, bool measure) {
  if (!cuda_unavailable(index).empty()) return std::nullopt;
  cuda::select_device(index, "train.device=cuda:" + std::to_string(index));
  const cuda::DeviceInfo info = cuda::device_info(index);
  CudaDeviceFacts facts{info.name, double(info.memory_bytes), 0, 0};
  if (measure) {
    facts.fp32_tflops = gemm_tflops(cuda::GemmInput::f32);
    facts.bf16_tflops = gemm_tflops(cuda::GemmInput::bf16);
  }
  return facts;
}

std::shared_ptr<Backend<float>> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_shared<CudaBackendT<RealCuda>>(options);
}

}  // namespace canonlab
