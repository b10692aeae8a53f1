#pragma once
// RealCuda: the CUDA layer of cuda_layer.h on a GPU, canonlab::cuda's kernels and runtime. Plain C++: any compiler can
// read it, only a build with the CUDA kernels (canonlab_cuda) links what it names.
#include "engine/cuda/cuda_layer.h"

namespace canonlab {

struct RealCuda {
#define CANONLAB_REAL_CUDA_FORWARD(name) CANONLAB_CUDA_FORWARD(::canonlab::cuda, name)
  CANONLAB_CUDA_LAYER_FUNCTIONS(CANONLAB_REAL_CUDA_FORWARD)
#undef CANONLAB_REAL_CUDA_FORWARD
  using Stream = cuda::Stream;
  using Event = cuda::Event;
  using Gemm = cuda::Gemm;
  using Graph = cuda::CudaGraph;
};

}  // namespace canonlab
