#pragma once
// A whole training step as one CUDA graph. Tiny models (4 layers, d = 128) spend more time launching ~200
// kernels than running them; replaying a captured graph costs one launch. Shapes are static for a run, so the
// step is captured once (after a first eager step has sized the arena and chosen every GEMM algorithm) and
// replayed every step. What changes between steps lives in device memory the graph reads (the batch, the
// learning-rate constants), copied in before each launch.
//
//   CudaGraph graph;
//   graph.capture(stream, [&] { forward_backward_update(stream); });   // records, does not run
//   for (...) { upload_batch(stream); graph.launch(stream); }
#include <cstddef>
#include <functional>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records everything `step` enqueues on `stream` and instantiates it, replacing an earlier graph. The capture
  // is thread-local: other threads' CUDA calls are unaffected. `step` must not allocate device memory,
  // synchronise with the host or use another stream; the runtime refuses those during capture, and the
  // refusal comes back as an Error (the stream is left usable). An exception thrown by `step` ends the capture
  // and propagates.
  void capture(CudaStream stream, const std::function<void()>& step);
  // Enqueues one replay on `stream` (need not be the capture stream).
  void launch(CudaStream stream) const;

  bool ready() const { return exec_ != nullptr; }
  // Kernels, copies and memsets recorded: what one launch replaces.
  size_t node_count() const;

 private:
  void reset();
  ::CUgraph_st* graph_ = nullptr;
  ::CUgraphExec_st* exec_ = nullptr;
};

}  // namespace canonlab::cuda
