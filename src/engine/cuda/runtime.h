#pragma once
// Devices and streams: how many GPUs there are, what they are, and an owned stream. Plain C++ (no CUDA
// header), so the CLI and the trainer can ask "is there a GPU?" without being compiled by nvcc.
#include <cstddef>
#include <string>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws). GPU tests skip on 0.
int device_count();
// Why device_count() is 0, in the runtime's words ("no CUDA-capable device is detected"); empty when it is not.
std::string no_device_reason();

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t memory_bytes = 0;
};
DeviceInfo device_info(int index);

// Makes device `index` current for this thread. `setting` names where the index came from ("train.device=cuda:1")
// so the error for a machine without that device says what to change; the CLI turns it into exit code 2.
void select_device(int index, const std::string& setting);

// Blocks until everything queued on `stream` has finished, and reports any fault a kernel hit (as an Error).
void synchronize(CudaStream stream);

// An owned non-blocking stream (it does not synchronise with the legacy default stream). Move-only.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CudaStream get() const { return stream_; }
  void synchronize() const { cuda::synchronize(stream_); }

 private:
  CudaStream stream_ = nullptr;
};

// Page-locked host memory, what stream-ordered copies from the host read (pinned_free(nullptr) does nothing).
void* pinned_allocate(size_t bytes);
void pinned_free(void* p) noexcept;

enum class CopyKind { host_to_device, device_to_host, device_to_device };
// A copy enqueued on `stream`: from host memory, `src` must be pinned and unchanged until the copy has run.
void memcpy_async(CudaStream stream, void* dst, const void* src, size_t bytes, CopyKind kind);

// A point in a stream the host can wait for: record() marks everything enqueued so far, synchronize() waits for it
// (at once when nothing was recorded). Move-only.
class Event {
 public:
  Event();
  ~Event();
  Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(CudaStream stream);
  void synchronize() const;

 private:
  ::CUevent_st* event_ = nullptr;
};

// Elapsed GPU time between two points of a stream, for benchmarks: start(), enqueue work, stop() returns ms.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(CudaStream stream);
  // Waits for the stop event and returns the milliseconds since start().
  float stop(CudaStream stream);

 private:
  ::CUevent_st* begin_ = nullptr;
  ::CUevent_st* end_ = nullptr;
};

}  // namespace canonlab::cuda
