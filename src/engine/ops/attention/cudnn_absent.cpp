// cudnn.h for a build without the cuDNN frontend's headers (src/engine/cuda/CMakeLists.txt compiles this file into
// canonlab_cuda instead of cudnn.cpp when it finds no include/cudnn_frontend.h): every case is unsupported, saying
// how to get the headers, and the others throw. convert_columns_from_bf16 is cudnn_convert.cu's in both builds.

#include <string>

#include "engine/error.h"
#include "engine/ops/attention/cudnn.h"

namespace canonlab::cuda {

namespace {

#if defined(CANONLAB_CUDNN_H_MISSING)
const char* const kWhy =
    "canonlab was built without cuDNN's own headers (cudnn.h: pip install nvidia-cudnn-cu13 into .venv or set "
    "CANONLAB_CUDNN_INCLUDE, then rebuild)";
#else
const char* const kWhy =
    "canonlab was built without the cudnn-frontend headers (pip install nvidia-cudnn-frontend into .venv, then "
    "rebuild)";
#endif

}  // namespace

std::string cudnn_attention_unsupported(int, int, int, int, bool, int) { return kWhy; }

size_t cudnn_attention_workspace_bytes(int, int, int, int, bool, int, bool) {
  throw Error(std::string("cudnn_attention_workspace_bytes: ") + kWhy);
}

void cudnn_attention_forward(CudaStream, float*, float*, const float*, const float*, const float*, int, bool, int, int,
                             int, int, int, float, void*) {
  throw Error(std::string("cudnn_attention_forward: ") + kWhy);
}

void cudnn_attention_backward(CudaStream, float*, float*, float*, int, const float*, const float*, const float*,
                              const float*, const float*, const float*, int, bool, int, int, int, int, int, float,
                              void*) {
  throw Error(std::string("cudnn_attention_backward: ") + kWhy);
}

}  // namespace canonlab::cuda

