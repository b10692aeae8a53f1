#pragma once
// How a CUDA backend is made (train.device, train.precision, train.cuda_graph).
#include "engine/backend/backend.h"

namespace canonlab {

struct CudaBackendOptions {
  int device = 0;                         // train.device = cuda:N
  Precision precision = Precision::fp32;  // train.precision
  bool graphs = true;                     // train.cuda_graph: the step as one captured graph
};

}  // namespace canonlab
