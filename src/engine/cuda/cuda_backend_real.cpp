// CudaBackendT over the GPU's layer: the one translation unit that instantiates it, in builds with the CUDA kernels
// (the library canonlab_cuda_backend; plain C++ all the same).
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_provider.h"
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

std::shared_ptr<Backend<float>> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_shared<CudaBackendT<RealCuda>>(options);
}

}  // namespace canonlab
