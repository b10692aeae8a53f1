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

std::optional<CudaDeviceFacts> cuda_device_facts(int index, bool) {
  if (index != 0) return std::nullopt;
  const cuda::DeviceInfo info = cuda_host::device_info(index);
  return CudaDeviceFacts{info.name, double(info.memory_bytes), 0, 0};  // its rates are the CPU's: not a GPU's
}

std::shared_ptr<Backend<float>> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_shared<CudaBackendT<HostCuda>>(options);
}

}  // namespace canonlab
