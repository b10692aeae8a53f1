#pragma once
// Error checking for the CUDA runtime and cuBLASLt: every failure becomes a canonlab::Error naming the call,
// where it was made and the runtime's own description, so the CLI reports it like any other error (exit 2).
// Kernel launches are checked with CANONLAB_CUDA_CHECK_LAUNCH() right after the <<<>>>: that catches a bad
// launch configuration; faults inside a kernel surface at the next synchronising call.
#include <cuda_runtime_api.h>

#include "engine/error.h"

namespace canonlab::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace canonlab::cuda

#define CANONLAB_CUDA_CHECK(call)                                                             \
  do {                                                                                        \
    const cudaError_t canonlab_err_ = (call);                                                 \
    if (canonlab_err_ != cudaSuccess)                                                         \
      ::canonlab::cuda::throw_cuda_error(canonlab_err_, #call, __FILE__, __LINE__);           \
  } while (0)

#define CANONLAB_CUDA_CHECK_LAUNCH() CANONLAB_CUDA_CHECK(cudaGetLastError())

#define CANONLAB_CUBLAS_CHECK(call)                                                           \
  do {                                                                                        \
    const int canonlab_status_ = int(call);                                                   \
    if (canonlab_status_ != 0)                                                                \
      ::canonlab::cuda::throw_cublas_error(canonlab_status_, #call, __FILE__, __LINE__);      \
  } while (0)
