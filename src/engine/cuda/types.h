#pragma once
// The two CUDA things the kernel headers (engine/ops/<op>/cuda.h) name, spelled so that plain C++ can include
// them without any CUDA header: an opaque stream handle and a bfloat16 storage type.
#include <cstdint>

// The runtime's own opaque handle types, declared where it declares them (the global namespace): cudaStream_t is
// CUstream_st*, cudaEvent_t CUevent_st*, cudaGraph_t CUgraph_st*, cudaGraphExec_t CUgraphExec_st*.
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace canonlab::cuda {

// The same type as cudaStream_t, so one converts to the other without a cast. nullptr is the legacy default stream.
using CudaStream = ::CUstream_st*;

// bfloat16 storage (the upper half of an IEEE float) for GEMM inputs in mixed precision. A distinct type so a
// float buffer is never passed where bf16 is expected; kernels reinterpret it as __nv_bfloat16.
enum class Bf16 : std::uint16_t {};

}  // namespace canonlab::cuda
