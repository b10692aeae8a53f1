// The stand-in device (device.h, host_cuda.h): memory, streams, capture and graphs, events, pinned memory, the
// runtime's queries and the Gemm object. One process-wide device, as a GPU is one per process: its state is the
// address space it hands out, guarded by a mutex (packs train on several threads).
#include "device.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "engine/error.h"
#include "host_cuda.h"

namespace canonlab::cuda_host {

namespace {

constexpr size_t kAlign = 256;     // cudaMalloc's alignment
constexpr size_t kGuard = 256;     // bytes after each allocation's end, checked when it is freed
constexpr uint8_t kGuardByte = 0xa5;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Device addresses: a reserved range nothing is mapped into, so dereferencing one on the host faults. Each allocation
// takes the next addresses (never reused: a freed address stays invalid) and host storage of its own.
class DeviceSpace {
 public:
  DeviceSpace() {
    for (size_t span = size_t(1) << 44; span >= (size_t(1) << 34) && !base_; span >>= 2) {
      void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) base_ = static_cast<std::byte*>(p), span_ = span;
    }
    if (!base_) throw Error("cuda_host: cannot reserve an address range for the stand-in's device memory");
  }

  void* allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t reserved = round_up(bytes > 0 ? bytes : 1, kAlign) + kAlign;  // a gap: an overrun hits no allocation
    if (next_ + reserved > span_) throw Error("cuda_host: the stand-in's device address range is used up");
    std::byte* device = base_ + next_;
    next_ += reserved;
    void* host = std::aligned_alloc(kAlign, round_up(bytes + kGuard, kAlign));
    if (!host) throw Error("cannot allocate " + std::to_string(bytes) + " bytes on the GPU (the host stand-in)");
    std::memset(host, 0xff, bytes);  // NaN: what nothing wrote shows
    std::memset(static_cast<std::byte*>(host) + bytes, kGuardByte, kGuard);
    live_[reinterpret_cast<uintptr_t>(device)] = {bytes, static_cast<std::byte*>(host)};
    live_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    return device;
  }

  void deallocate(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    if (it == live_.end()) fail("cuda_host: free of " + describe(p) + ", which is not a live allocation");
    for (size_t i = 0; i < kGuard; i++)
      if (uint8_t(it->second.host[it->second.bytes + i]) != kGuardByte)
        fail("cuda_host: something wrote past the end of the " + std::to_string(it->second.bytes) +
             "-byte allocation at " + describe(p) + " (its guard was changed)");
    std::free(it->second.host);
    live_bytes_ -= it->second.bytes;
    live_.erase(it);
  }

  std::byte* translate(const void* p, size_t bytes, const char* op, const char* argument) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = live_.upper_bound(a);
    if (p != nullptr && it != live_.begin()) {
      --it;
      if (a >= it->first && a + bytes <= it->first + it->second.bytes) return it->second.host + (a - it->first);
      if (bytes == 0 && a >= it->first && a <= it->first + it->second.bytes) return it->second.host + (a - it->first);
    }
    if (p == nullptr && bytes == 0) return nullptr;
    std::ostringstream m;
    m << "cuda_host: " << (op ? op : "?") << ": argument '" << argument << "' [" << describe(p) << ", +" << bytes
      << " bytes) ";
    if (p == nullptr) m << "is null";
    else if (it != live_.end() && a >= it->first && a < it->first + it->second.bytes + kAlign)
      m << "runs past the end of its allocation [" << describe(reinterpret_cast<void*>(it->first)) << ", +"
        << it->second.bytes << " bytes) by " << (a + bytes - it->first - it->second.bytes) << " bytes";
    else if (a >= reinterpret_cast<uintptr_t>(base_) && a < reinterpret_cast<uintptr_t>(base_) + span_)
      m << "is not inside a live allocation (freed, or out of range)";
    else m << "is not device memory (a host pointer passed to a kernel?)";
    throw Error(m.str());
  }

  size_t live_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_bytes_;
  }
  size_t peak_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_bytes_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_bytes_ = live_bytes_;
  }

 private:
  struct Allocation {
    size_t bytes;
    std::byte* host;
  };
  std::string describe(const void* p) const {
    std::ostringstream s;
    s << "device+0x" << std::hex << (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(base_));
    return p ? s.str() : "null";
  }
  // A broken heap cannot be reported by an exception from a noexcept free: stop the process with the finding.
  [[noreturn]] static void fail(const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::abort();
  }

  std::mutex mutex_;
  std::byte* base_ = nullptr;
  size_t span_ = 0, next_ = kAlign;
  std::map<uintptr_t, Allocation> live_;
  size_t live_bytes_ = 0, peak_bytes_ = 0;
};

DeviceSpace& space() {
  static DeviceSpace device;
  return device;
}

// Pinned host blocks (pinned_allocate): a stream-ordered copy from the host must read one of them.
std::mutex pinned_mutex;
std::map<uintptr_t, size_t> pinned_blocks;

bool is_pinned(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = pinned_blocks.upper_bound(a);
  if (it == pinned_blocks.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

// A stream: where its work goes while it is being captured.
struct HostStream {
  std::vector<std::function<void()>>* recording = nullptr;
};
HostStream default_stream;
HostStream& stream_of(cuda::CudaStream s) { return s ? *reinterpret_cast<HostStream*>(s) : default_stream; }

thread_local const HostStream* capturing_on_this_thread = nullptr;
thread_local const char* running_op = nullptr;
std::atomic<uint64_t> enqueued{0};

class HostDeviceMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::cuda; }
  bool host_accessible() const override { return false; }
  void* allocate(size_t bytes) override {
    refuse_while_capturing("cudaMalloc");
    return space().allocate(bytes);
  }
  void deallocate(void* p) noexcept override {
    if (p) space().deallocate(p);
  }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    refuse_while_capturing("cudaMemcpy (host to device)");
    if (bytes) std::memcpy(space().translate(dst, bytes, "copy_from_host", "dst"), host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    refuse_while_capturing("cudaMemcpy (device to host)");
    if (bytes) std::memcpy(host_dst, space().translate(src, bytes, "copy_to_host", "src"), bytes);
  }
  void fill_bytes(void* dst, int byte, size_t bytes) override {
    refuse_while_capturing("cudaMemset");
    if (bytes) std::memset(space().translate(dst, bytes, "fill_bytes", "dst"), byte, bytes);
  }
};

}  // namespace

// ---- device.h ----

void enqueue(cuda::CudaStream stream, const char* op, std::function<void()> work) {
  enqueued++;
  HostStream& s = stream_of(stream);
  auto run = [op, work = std::move(work)] {
    const char* outer = running_op;
    running_op = op;
    try {
      work();
    } catch (...) {
      running_op = outer;
      throw;
    }
    running_op = outer;
  };
  if (s.recording) s.recording->push_back(std::move(run));
  else run();
}

void refuse_while_capturing(const char* what) {
  if (capturing_on_this_thread)
    throw Error(std::string("cuda_host: ") + what +
                " while a CUDA graph is being captured on this thread (a GPU refuses it: the step must not allocate, "
                "copy synchronously or wait on the host)");
}

std::byte* device_range(const void* p, size_t bytes, const char* argument) {
  return space().translate(p, bytes, running_op, argument);
}

void poison(void* host, size_t bytes) {
  if (host && bytes) std::memset(host, 0xff, bytes);
}

// ---- runtime ----

int device_count() { return 1; }
std::string no_device_reason() { return ""; }

DeviceInfo device_info(int index) {
  DeviceInfo d;
  d.name = "host stand-in of the CUDA layer";
  d.major = 9, d.minor = 0, d.multiprocessors = 1;
  d.memory_bytes = size_t(80) << 30;  // as an H100's: what a GPU run's estimate is checked against
  return d;
}

void select_device(int index, const std::string& setting) {
  if (index != 0)
    throw Error(setting + ": there is no CUDA device " + std::to_string(index) + "; this machine has 1 (cuda:0)");
}

void synchronize(CudaStream stream) { refuse_while_capturing("cudaStreamSynchronize"); }

DeviceMemory& device_memory() {
  static HostDeviceMemory memory;
  return memory;
}

void* pinned_allocate(size_t bytes) {
  refuse_while_capturing("cudaMallocHost");
  void* p = std::aligned_alloc(kAlign, round_up(bytes > 0 ? bytes : 1, kAlign));
  if (!p) throw Error("cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory (the host stand-in)");
  std::lock_guard<std::mutex> lock(pinned_mutex);
  pinned_blocks[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void pinned_free(void* p) noexcept {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned_blocks.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
}

void memcpy_async(CudaStream stream, void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  // A graph replays a copy from the host by reading the source again: only pinned memory is allowed, as on a GPU.
  if (kind == CopyKind::host_to_device && !is_pinned(src, bytes))
    throw Error("cuda_host: memcpy_async: the host source is not pinned memory (pinned_allocate)");
  if (kind == CopyKind::device_to_host && !is_pinned(dst, bytes))
    throw Error("cuda_host: memcpy_async: the host destination is not pinned memory (pinned_allocate)");
  enqueue(stream, "memcpy_async", [=] {
    if (kind == CopyKind::host_to_device) std::memcpy(device_range(dst, bytes, "dst"), src, bytes);
    else if (kind == CopyKind::device_to_host) std::memcpy(dst, device_range(src, bytes, "src"), bytes);
    else std::memmove(device_range(dst, bytes, "dst"), device_range(src, bytes, "src"), bytes);
  });
}

Stream::Stream() { stream_ = reinterpret_cast<CudaStream>(new HostStream); }
Stream::~Stream() { delete reinterpret_cast<HostStream*>(stream_); }
Stream::Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    delete reinterpret_cast<HostStream*>(stream_);
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

void Event::record(CudaStream) {}
void Event::synchronize() const { refuse_while_capturing("cudaEventSynchronize"); }

Gemm::Gemm(CudaStream stream, size_t) : stream_(stream) {}

const float* Gemm::ones(size_t n) {
  if (ones_.size() < n) {
    refuse_while_capturing("Gemm::ones growing its vector (reserve it before the capture)");
    ones_ = DeviceBuffer<float>(device_memory(), n);
    const std::vector<float> host(n, 1.f);
    ones_.upload(host);
  }
  return ones_.data();
}

void CudaGraph::capture(CudaStream stream, const std::function<void()>& step) {
  if (capturing_on_this_thread) throw Error("cuda_host: a graph capture inside another capture");
  HostStream& s = stream_of(stream);
  auto recorded = std::make_shared<std::vector<std::function<void()>>>();
  s.recording = recorded.get();
  capturing_on_this_thread = &s;
  try {
    step();
  } catch (...) {
    s.recording = nullptr;
    capturing_on_this_thread = nullptr;
    throw;
  }
  s.recording = nullptr;
  capturing_on_this_thread = nullptr;
  nodes_ = std::move(recorded);
  ready_ = true;
}

void CudaGraph::launch(CudaStream stream) const {
  CANONLAB_CHECK(ready_, "CudaGraph::launch: nothing has been captured");
  enqueue(stream, "graph launch", [nodes = nodes_] {
    for (const auto& node : *nodes) node();
  });
}

size_t live_device_bytes() { return space().live_bytes(); }
size_t peak_device_bytes() { return space().peak_bytes(); }
void reset_peak_device_bytes() { space().reset_peak(); }
uint64_t ops_enqueued() { return enqueued.load(); }

}  // namespace canonlab::cuda_host
