#pragma once
// The CUDA backend a program has, chosen when it is linked (make_backend asks here for train.device = cuda:N):
//   cuda_backend_real.cpp    the GPU's, CudaBackendT<RealCuda> (builds with the CUDA kernels: canonlab_cuda_backend)
//   cuda_backend_absent.cpp  none (builds without nvcc; part of canonlab_core there)
//   tests/cuda_host/         the host stand-in's, CudaBackendT<HostCuda>, linked into the CPU suite's binaries in
//                            place of either, so they train on train.device=cuda through CudaBackend's own code
// Each defines the three functions below.
#include <memory>
#include <optional>
#include <string>

#include "engine/backend/backend.h"
#include "engine/cuda/cuda_backend_options.h"

namespace canonlab {

// What train.device = cuda means in this program: "cuda" (GPUs), "none", or "host stand-in".
std::string cuda_backend_kind();
// "" when train.device = cuda:index can run here; otherwise why not (the build, the machine), for the message that
// names train.device.
std::string cuda_unavailable(int index);
std::shared_ptr<Backend<float>> make_cuda_backend(const CudaBackendOptions& options);

// What the resource estimate needs to know of a GPU: its name, its memory and, when measured, its matrix rates.
struct CudaDeviceFacts {
  std::string name;
  double memory_bytes = 0;
  double fp32_tflops = 0, bf16_tflops = 0;  // cuBLASLt GEMMs of 4096^3, measured; 0 = not measured
};
// The facts of cuda:index, measuring the GEMM rates when `measure` (a second or so); nullopt where train.device =
// cuda:index cannot run (cuda_unavailable says why).
std::optional<CudaDeviceFacts> cuda_device_facts(int index, bool measure);

}  // namespace canonlab
