#pragma once
// How a CUDA backend is made (train.device, train.precision, train.cuda_graph).
#include <string>

#include "engine/backend/backend.h"

namespace canonlab {

// train.attention_kernel: who runs softmax attention with precision bf16 (fp32 always runs the fp32 flash kernel).
enum class AttentionKernel {
  automatic,  // cuDNN's fused attention where it takes the case, else the flash kernel; each choice reported
  flash,      // canonlab's flash kernel
  cudnn,      // cuDNN for every attention layer; a case it refuses is an Error
};
AttentionKernel parse_attention_kernel(const std::string& text);  // "auto" | "flash" | "cudnn"

struct CudaBackendOptions {
  int device = 0;                         // train.device = cuda:N
  Precision precision = Precision::fp32;  // train.precision
  bool graphs = true;                     // train.cuda_graph: the step as one captured graph
  AttentionKernel attention = AttentionKernel::automatic;  // train.attention_kernel
  // The memory to allocate from instead of the layer's device memory, and whether it only counts (the resource
  // estimate's CountingMemory, with the layer that launches nothing: engine/backend/counting_backend.h).
  DeviceMemory* memory = nullptr;
  bool counting = false;
};

}  // namespace canonlab
