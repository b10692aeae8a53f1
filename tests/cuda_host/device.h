#pragma once
// The stand-in device behind host_cuda.h: its memory (device addresses the host cannot dereference, each backed by
// host storage), the translation of a device pointer range into host storage, and the streams on which work runs at
// once or is recorded into a graph.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/cuda/types.h"

namespace canonlab::cuda_host {

// Runs `work` for op `op` on `stream` now, or records it while the stream is being captured. Inside `work`,
// device_range() names `op` in its errors.
void enqueue(cuda::CudaStream stream, const char* op, std::function<void()> work);

// Throws while the calling thread captures a graph: what `what` does (allocate, copy synchronously, wait) would break
// the capture on a GPU.
void refuse_while_capturing(const char* what);

// The host storage of device bytes [p, p + bytes) of one live allocation (p may be null when bytes is 0). Throws an
// Error naming the op being run, the argument and the allocation when the range is not inside one.
std::byte* device_range(const void* p, size_t bytes, const char* argument);

// Device pointer -> host pointer for `count` elements of T; null stays null (an optional argument).
template <class T>
T* dev(T* p, size_t count, const char* argument) {
  if (p == nullptr) return nullptr;
  return reinterpret_cast<T*>(device_range(p, count * sizeof(T), argument));
}
// The same for a required argument: null is an error.
template <class T>
T* need(T* p, size_t count, const char* argument) {
  if (p == nullptr && count > 0) device_range(nullptr, count * sizeof(T), argument);  // throws, naming it
  return dev(p, count, argument);
}
// Elements spanned by `rows` rows of `cols` values, `ld` apart.
inline size_t strided(long rows, long cols, long ld) { return rows > 0 && cols > 0 ? size_t((rows - 1) * ld + cols) : 0; }

// Fills the host storage behind a device range with NaN bytes (0xff): scratch an op is given is overwritten, so a
// caller that relies on scratch keeping its content across ops, or that gives too little, shows.
void poison(void* host, size_t bytes);

}  // namespace canonlab::cuda_host
