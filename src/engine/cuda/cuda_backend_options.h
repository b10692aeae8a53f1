#pragma once
// How a CUDA backend is made (train.device, train.precision, train.cuda_graph).
#include "engine/backend/backend.h"

namespace canonlab {

struct CudaBackendOptions {
  int device = 0;                         // train.device = cuda:N
  Precision precision = Precision::fp32;  // train.precision
  bool graphs = true;                     // train.cuda_graph: the step as one captured graph
  // The memory to allocate from instead of the layer's device memory, and whether it only counts (the resource
  // estimate's CountingMemory, with the layer that launches nothing: engine/backend/counting_backend.h).
  DeviceMemory* memory = nullptr;
  bool counting = false;
};

}  // namespace canonlab
