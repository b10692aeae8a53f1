#pragma once
// GPU memory behind the backends' one memory interface (engine/backend/memory.h): cudaMalloc'd buffers of the
// current device, owned by canonlab::DeviceBuffer like every other buffer. Plain C++ (no CUDA header).
// copy_from_host, copy_to_host and fill_bytes are synchronous: each has completed when it returns, so it is ordered
// with every stream, including non-blocking ones (tests, checkpoints, probes). The training loop uses
// stream-ordered copies instead. copy_to_host does not wait for other streams: synchronise the one that wrote first.
#include "engine/backend/memory.h"

namespace canonlab::cuda {

// The current device's memory (cudaSetDevice / select_device choose it). Stateless, like host_memory().
DeviceMemory& device_memory();

}  // namespace canonlab::cuda
