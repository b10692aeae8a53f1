// A build without the CUDA kernels (no nvcc, or -DCANONLAB_CUDA=OFF): train.device = cuda is refused by name.
#include "engine/cuda/cuda_provider.h"
#include "engine/error.h"

namespace canonlab {

std::string cuda_backend_kind() { return "none"; }

std::string cuda_unavailable(int) {
  return "needs canonlab built with the CUDA backend and a GPU; this build has no CUDA backend";
}

std::optional<CudaDeviceFacts> cuda_device_facts(int, bool) { return std::nullopt; }

std::shared_ptr<Backend<float>> make_cuda_backend(const CudaBackendOptions& options) {
  throw Error("train.device: 'cuda:" + std::to_string(options.device) + "' " + cuda_unavailable(options.device) +
              " (allowed here: cpu)");
}

}  // namespace canonlab
