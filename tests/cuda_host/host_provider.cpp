// The CUDA backend of the binaries that link this file (canonlab_cuda_host_tests, canonlab_host_cuda): CudaBackend
// over the host stand-in of the CUDA layer, in place of the GPU's (engine/cuda/cuda_provider.h). An object file of
// each executable, so the linker takes these definitions and never pulls cuda_backend_real.cpp's or
// cuda_backend_absent.cpp's from the libraries.
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_provider.h"
#include "host_cuda.h"

namespace canonlab {

template class CudaBackendT<HostCuda>;

std::string cuda_backend_kind() { return "host stand-in"; }

std::string cuda_unavailable(int index) {
  return index == 0 ? "" : "names a GPU this machine lacks: the host stand-in has one (cuda:0)";
}

std::shared_ptr<Backend<float>> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_shared<CudaBackendT<HostCuda>>(options);
}

}  // namespace canonlab
