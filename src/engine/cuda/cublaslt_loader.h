#pragma once
// cuBLASLt loaded at run time (cublaslt_loader.cpp). canonlab_cuda does not link libcublasLt.so.13 (541 MB, more
// than a bundle may carry to a GPU machine, and present on every CUDA 13 install anyway): it defines the cublasLt
// functions gemm.cu calls, each forwarding to the library that the first call of any of them (or of the functions
// below) finds and opens with dlopen, searched in this order:
//   1. $CANONLAB_CUBLASLT_DIR
//   2. the directory of the running executable, then its lib/
//   3. $CUDA_HOME/lib64, /usr/local/cuda/lib64, /usr/local/cuda/targets/x86_64-linux/lib
//   4. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache) by soname
//   5. Python's nvidia wheels: <prefix>/lib/python3*/{site,dist}-packages/nvidia/*/lib for the prefixes
//      $VIRTUAL_ENV, $CONDA_PREFIX, $HOME/.local, /usr/local, /usr
// When none holds it, every cublasLt function returns CUBLAS_STATUS_NOT_INITIALIZED and prints nothing; the Gemm
// constructor (and the cuBLASLt error check) turn cublaslt_load_error() into a canonlab::Error.
#include <string>

namespace canonlab::cuda {

// Empty once the library is loaded; otherwise why not: the library's name and every place searched, with what each
// said. Loads on the first call (thread-safe; the search runs once per process).
std::string cublaslt_load_error();

// The file the library was loaded from (empty when it was not).
std::string cublaslt_path();

}  // namespace canonlab::cuda
