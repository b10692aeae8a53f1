// CUDA graph capture and replay of a training step (graph.h).
#include <cuda_runtime_api.h>

#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/graph.h"

namespace canonlab::cuda {

CudaGraph::~CudaGraph() { reset(); }

CudaGraph::CudaGraph(CudaGraph&& other) noexcept : graph_(other.graph_), exec_(other.exec_) {
  other.graph_ = nullptr;
  other.exec_ = nullptr;
}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    reset();
    graph_ = other.graph_;
    exec_ = other.exec_;
    other.graph_ = nullptr;
    other.exec_ = nullptr;
  }
  return *this;
}

void CudaGraph::reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void CudaGraph::capture(CudaStream stream, const std::function<void()>& step) {
  reset();
  CANONLAB_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    step();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream, &graph);
  if (err != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw Error(std::string("CUDA graph capture of the training step failed: ") + cudaGetErrorString(err) +
                " (the step allocated device memory, synchronised with the host or used another stream while "
                "being captured)");
  }
  graph_ = graph;
  CANONLAB_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::launch(CudaStream stream) const {
  CANONLAB_CHECK(exec_ != nullptr, "CudaGraph::launch: nothing has been captured");
  CANONLAB_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

size_t CudaGraph::node_count() const {
  if (!graph_) return 0;
  size_t n = 0;
  CANONLAB_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
  return n;
}

}  // namespace canonlab::cuda
