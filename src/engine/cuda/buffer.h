#pragma once
// A DeviceBuffer (engine/backend/memory.h) in GPU memory, constructed from a size or a host array: the kernels'
// tests and the cuBLASLt workspace use this shorthand; ownership, copies and fills are DeviceBuffer's own, through
// device_memory() (engine/cuda/memory.h: synchronous copies and fills).
#include <cstddef>
#include <span>

#include "engine/backend/memory.h"
#include "engine/cuda/memory.h"

namespace canonlab::cuda {

template <class T>
class DeviceBuffer : public canonlab::DeviceBuffer<T> {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : canonlab::DeviceBuffer<T>(device_memory(), count) {}
  explicit DeviceBuffer(std::span<const T> host) : canonlab::DeviceBuffer<T>(device_memory(), host) {}
};

}  // namespace canonlab::cuda
