// The cublasLt functions gemm.cu calls, forwarding to libcublasLt.so.13 opened with dlopen on first use
// (cublaslt_loader.h has the why and the search order). Plain C++: it needs only cublasLt.h's declarations, which
// this file's definitions must match exactly (the compiler checks them against the header).
#include "engine/cuda/cublaslt_loader.h"
#include "engine/cuda/library_search.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <glob.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace canonlab::cuda {

namespace {

constexpr const char* kSoname = "libcublasLt.so.13";

// Every function canonlab calls; a library lacking one of them is passed over (and said so).
#define CANONLAB_CUBLASLT_FUNCTIONS(X)                                                                  \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)             \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)            \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                                  \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)

struct Library {
  std::string path, error;
#define CANONLAB_DECLARE(name) decltype(&::name) name = nullptr;
  CANONLAB_CUBLASLT_FUNCTIONS(CANONLAB_DECLARE)
#undef CANONLAB_DECLARE
};

// Opens `file` (a path, or the soname for the loader's own search) and takes every function from it. True when
// all were there; otherwise `why` says what went wrong and nothing stays open.
bool open_library(const std::string& file, Library& lib, std::string& why) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    why = e ? e : "dlopen failed";
    return false;
  }
  Library found;
#define CANONLAB_RESOLVE(name)                                                         \
  found.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));              \
  if (found.name == nullptr) {                                                         \
    why = "has no " #name " (a cuBLASLt older than CUDA 13?)";                         \
    dlclose(handle);                                                                   \
    return false;                                                                      \
  }
  CANONLAB_CUBLASLT_FUNCTIONS(CANONLAB_RESOLVE)
#undef CANONLAB_RESOLVE
  // The file the loader picked (for a soname, the one its own search found).
  link_map* map = nullptr;
  found.path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name ? map->l_name : file;
  lib = found;
  return true;  // the handle stays open for the life of the process
}

std::vector<std::string> python_wheel_dirs() {
  std::vector<std::string> dirs;
  for (const std::string& file : python_package_paths(std::string("nvidia/*/lib/") + kSoname, false))
    dirs.push_back(std::filesystem::path(file).parent_path());
  return dirs;
}

Library load() {
  Library lib;
  LibrarySearch search(kSoname, [&](const std::string& file, std::string& why) { return open_library(file, lib, why); });
  const char* env_dir = std::getenv("CANONLAB_CUBLASLT_DIR");
  if (search.try_dir(env_dir && *env_dir ? "$CANONLAB_CUBLASLT_DIR: " : "$CANONLAB_CUBLASLT_DIR (unset)",
                     env_dir ? env_dir : ""))
    return lib;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && (search.try_dir("", exe.parent_path()) || search.try_dir("", exe.parent_path() / "lib"))) return lib;
  const char* cuda_home = std::getenv("CUDA_HOME");
  if (search.try_dir(cuda_home && *cuda_home ? "" : "$CUDA_HOME/lib64 (CUDA_HOME unset)",
                     cuda_home && *cuda_home ? std::string(cuda_home) + "/lib64" : ""))
    return lib;
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"})
    if (search.try_dir("", dir)) return lib;
  if (search.try_loader_path()) return lib;
  const std::vector<std::string> wheels = python_wheel_dirs();
  for (const std::string& dir : wheels)
    if (search.try_dir("", dir)) return lib;
  if (wheels.empty()) search.note("Python's nvidia wheels (<prefix>/lib/python3*/{site,dist}-packages/nvidia/*/lib): none");
  lib.error = std::string("cannot load ") + kSoname +
              " (cuBLASLt of CUDA 13, which the GPU's matrix products need); searched:" + search.searched() +
              "\nset CANONLAB_CUBLASLT_DIR to the directory that holds it (any CUDA 13 toolkit's lib64, or the "
              "nvidia/cu13/lib of PyTorch's nvidia-cublas wheel)";
  return lib;
}

const Library& library() {
  static std::once_flag once;
  static Library lib;
  std::call_once(once, [] { lib = load(); });
  return lib;
}

}  // namespace

std::string cublaslt_load_error() { return library().error; }
std::string cublaslt_path() { return library().path; }

}  // namespace canonlab::cuda

// The definitions gemm.cu links against (C linkage, from cublasLt.h): the library's function, or
// CUBLAS_STATUS_NOT_INITIALIZED when it could not be loaded.
using canonlab::cuda::library;

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  const auto f = library().cublasLtCreate;
  return f ? f(lightHandle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  const auto f = library().cublasLtDestroy;
  return f ? f(lightHandle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                           void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  const auto f = library().cublasLtMatmul;
  return f ? f(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
               workspaceSizeInBytes, stream)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                           cublasLtMatmulDesc_t operationDesc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference,
                                                           int requestedAlgoCount,
                                                           cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                           int* returnAlgoCount) {
  const auto f = library().cublasLtMatmulAlgoGetHeuristic;
  return f ? f(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
               heuristicResultsArray, returnAlgoCount)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                                     cublasComputeType_t computeType, cudaDataType_t scaleType) {
  const auto f = library().cublasLtMatmulDescCreate;
  return f ? f(matmulDesc, computeType, scaleType) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  const auto f = library().cublasLtMatmulDescDestroy;
  return f ? f(matmulDesc) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t sizeInBytes) {
  const auto f = library().cublasLtMatmulDescSetAttribute;
  return f ? f(matmulDesc, attr, buf, sizeInBytes) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  const auto f = library().cublasLtMatmulPreferenceCreate;
  return f ? f(pref) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  const auto f = library().cublasLtMatmulPreferenceDestroy;
  return f ? f(pref) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
  const auto f = library().cublasLtMatmulPreferenceSetAttribute;
  return f ? f(pref, attr, buf, sizeInBytes) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  const auto f = library().cublasLtMatrixLayoutCreate;
  return f ? f(matLayout, type, rows, cols, ld) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  const auto f = library().cublasLtMatrixLayoutDestroy;
  return f ? f(matLayout) : CUBLAS_STATUS_NOT_INITIALIZED;
}
