// The CUDA emulator's runtime: devices, memory, streams and events, answered on the CPU with the
// semantics the backend relies on (docs/gpu.md, "The CUDA emulator"):
//   - a stream is an ordered queue with one worker thread; kernels, copies and event records run
//     there, later than the call that queued them, so a missing synchronisation shows up as a
//     wrong result here as on a GPU;
//   - cudaMemcpyAsync from pageable host memory reads the source before it returns, and into pageable
//     memory waits for the copy, as the driver does; with pinned memory (cudaHostAlloc) both stay
//     asynchronous: the pinned paths are the ones that need events;
//   - events are generations: a record bumps the count to wait for, its task marks it reached;
//     cudaStreamWaitEvent waits for the record made before the call;
//   - cudaMalloc'd memory starts filled with 0xff bytes (NaN as float, -1 as int64), so reading memory
//     nothing wrote is visible; copies and cuBLAS check that device ranges lie inside one allocation;
//   - a kernel fault (a barrier not all threads reach, ...) poisons the context: every later call
//     returns the error, as after an illegal address on a GPU.
// Environment: MT_CUDA_EMU_DEVICES (emulated GPUs, default 2), MT_CUDA_EMU_DRIVER=old (answer
// cudaGetDeviceCount with cudaErrorInsufficientDriver, as a driver older than the toolkit does).
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "emu_internal.h"

struct CUstream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  bool busy = false, stop = false;
  std::thread worker;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      std::function<void()> task = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      task();
      lock.lock();
      busy = false;
      changed.notify_all();
    }
  }
  void push(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(task));
    changed.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return queue.empty() && !busy; });
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex);
    return queue.empty() && !busy;
  }
};

struct CUevent_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable reached_cv;
  uint64_t recorded = 0, reached = 0;  // generations: records made, records the stream has passed

  void reach(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex);
    if (generation > reached) reached = generation;
    reached_cv.notify_all();
  }
  void wait_for(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mutex);
    reached_cv.wait(lock, [&] { return reached >= generation; });
  }
};

namespace mt_emu {
namespace {

struct Allocation {
  size_t bytes;
  int device;
  bool pinned;  // host memory from cudaHostAlloc
};

struct Runtime {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;  // by start address
  std::vector<size_t> device_bytes;             // in use per device
  std::vector<cudaStream_t> streams;            // live streams, for cudaFree's device-wide wait
  std::vector<cudaStream_t> default_streams;    // per device, made on first use
  std::vector<cudaDeviceProp> properties;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_detail;
  std::map<int, std::string> details;  // the latest detail per error code, for cudaGetErrorString
};

int emulated_devices() {
  const char* v = std::getenv("MT_CUDA_EMU_DEVICES");
  return v ? std::atoi(v) : 2;
}
bool driver_too_old() {
  const char* v = std::getenv("MT_CUDA_EMU_DRIVER");
  return v && std::strcmp(v, "old") == 0;
}

Runtime& rt() {
  static Runtime* r = [] {
    auto* made = new Runtime;  // never destroyed: stream workers may run during exit
    const int n = emulated_devices();
    made->device_bytes.assign(n, 0);
    made->default_streams.assign(n, nullptr);
    for (int d = 0; d < n; ++d) {
      cudaDeviceProp p{};
      std::snprintf(p.name, sizeof p.name, "CUDA emulator on the CPU (tests/cuda_emu), device %d", d);
      p.totalGlobalMem = size_t{2} << 30;
      p.multiProcessorCount = 2;  // small grids: elementwise_geometry caps at 64 blocks
      p.major = 9;
      p.minor = 0;
      p.warpSize = 32;
      p.maxThreadsPerBlock = 1024;
      p.maxGridSize[0] = 0x7fffffff;
      p.maxGridSize[1] = p.maxGridSize[2] = 65535;
      p.maxThreadsDim[0] = p.maxThreadsDim[1] = 1024;
      p.maxThreadsDim[2] = 64;
      p.sharedMemPerBlock = 48 << 10;
      made->properties.push_back(p);
    }
    return made;
  }();
  return *r;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last = cudaSuccess;

// Every call first returns a poisoned context's error.
cudaError_t sticky() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.sticky;
}

cudaError_t fail(cudaError_t error, const std::string& detail) { return set_last_error(error, detail); }

cudaStream_t resolve(cudaStream_t stream) {
  if (stream != nullptr) return stream;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  cudaStream_t& s = r.default_streams[t_device];
  if (s == nullptr) {
    s = new CUstream_st;
    s->device = t_device;
    s->worker = std::thread([s] { s->run(); });
    r.streams.push_back(s);
  }
  return s;
}

const Allocation* find(const void* ptr, uintptr_t* start = nullptr) {
  Runtime& r = rt();
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = r.allocations.upper_bound(p);
  if (it == r.allocations.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.bytes && !(it->second.bytes == 0 && p == it->first)) return nullptr;
  if (start) *start = it->first;
  return &it->second;
}

bool is_pinned_range(const void* ptr) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const Allocation* a = find(ptr);
  return a && a->pinned;
}

void drain_all() {
  Runtime& r = rt();
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    streams = r.streams;
  }
  for (cudaStream_t s : streams) s->drain();
}

// Checks one side of a copy: device memory lies in one allocation; host memory is not device memory.
bool check_side(const void* p, size_t bytes, bool device, const char* which, std::string& why) {
  if (device) {
    if (is_device_range(p, bytes)) return true;
    why = std::string(which) + " [" + std::to_string(reinterpret_cast<uintptr_t>(p)) + ", +" + std::to_string(bytes) +
          ") is not inside one cudaMalloc allocation";
    return false;
  }
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const Allocation* a = find(p);
  if (a && !a->pinned) {
    why = std::string(which) + " is device memory, but the copy kind says host";
    return false;
  }
  return true;
}

}  // namespace

cudaError_t set_last_error(cudaError_t error, const std::string& detail) {
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.details[error] = detail;
  }
  std::fprintf(stderr, "CUDA emulator: %s\n", detail.c_str());
  t_last = error;
  return error;
}

void fail_context(cudaError_t error, const std::string& detail) {
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.sticky == cudaSuccess) {
      r.sticky = error;
      r.sticky_detail = detail;
      r.details[error] = detail;
    }
  }
  std::fprintf(stderr, "CUDA emulator: %s\n", detail.c_str());
}

void reset_context() {
  drain_all();
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.sticky = cudaSuccess;
  r.sticky_detail.clear();
  t_last = cudaSuccess;
}

void enqueue(cudaStream_t stream, std::function<void()> task) { resolve(stream)->push(std::move(task)); }
int stream_device(cudaStream_t stream) { return resolve(stream)->device; }
int current_device_index() { return t_device; }
const cudaDeviceProp& device_properties(int device) { return rt().properties.at(device); }

bool is_device_range(const void* ptr, size_t bytes) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  uintptr_t start = 0;
  const Allocation* a = find(ptr, &start);
  return a && !a->pinned && reinterpret_cast<uintptr_t>(ptr) + bytes <= start + a->bytes;
}

}  // namespace mt_emu

using namespace mt_emu;

#define MT_EMU_STICKY()                                     \
  do {                                                      \
    if (const cudaError_t s_ = sticky(); s_ != cudaSuccess) \
      return s_;                                            \
  } while (0)

// ---- devices and errors ------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  if (driver_too_old()) {
    *count = 0;
    return t_last = cudaErrorInsufficientDriver;
  }
  *count = static_cast<int>(rt().properties.size());
  return *count > 0 ? cudaSuccess : (t_last = cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= static_cast<int>(rt().properties.size()))
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): no such device");
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= static_cast<int>(rt().properties.size()))
    return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(" + std::to_string(device) + "): no such device");
  *prop = rt().properties[device];
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = driver_too_old() ? 12020 : 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  drain_all();
  MT_EMU_STICKY();
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  if (const cudaError_t s = sticky(); s != cudaSuccess) return s;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  if (const cudaError_t s = sticky(); s != cudaSuccess) return s;
  return t_last;
}
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t error) {
  const char* base = "unknown error";
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidValue: base = "invalid argument"; break;
    case cudaErrorMemoryAllocation: base = "out of memory"; break;
    case cudaErrorInvalidConfiguration: base = "invalid configuration argument"; break;
    case cudaErrorInvalidDevice: base = "invalid device ordinal"; break;
    case cudaErrorInvalidResourceHandle: base = "invalid resource handle"; break;
    case cudaErrorIllegalAddress: base = "an illegal memory access was encountered"; break;
    case cudaErrorLaunchFailure: base = "unspecified launch failure"; break;
    default: break;
  }
  // The emulator's detail after the runtime's words; kept per code, valid until the next error of
  // that code (callers copy the text into their exception at once).
  static thread_local std::string text;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.details.find(error);
  text = std::string(base) + (it == r.details.end() ? "" : " (CUDA emulator: " + it->second + ")");
  return text.c_str();
}

// ---- memory --------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  MT_EMU_STICKY();
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.device_bytes[t_device] + bytes > r.properties[t_device].totalGlobalMem) {
      t_last = cudaErrorMemoryAllocation;
      return cudaErrorMemoryAllocation;
    }
  }
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (!p) return t_last = cudaErrorMemoryAllocation;
  std::memset(p, 0xff, rounded);  // never-written memory reads as NaN / -1
  std::lock_guard<std::mutex> lock(r.mutex);
  r.allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, t_device, false};
  r.device_bytes[t_device] += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  drain_all();  // as on a GPU, cudaFree waits for the device
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.allocations.end() || it->second.pinned) {
    t_last = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  r.device_bytes[it->second.device] -= it->second.bytes;
  r.allocations.erase(it);
  std::free(ptr);
  return r.sticky;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) {
  MT_EMU_STICKY();
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + (bytes == 0 ? 4096 : 0));
  if (!p) return t_last = cudaErrorMemoryAllocation;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, -1, true};
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  drain_all();
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.allocations.end() || !it->second.pinned) return t_last = cudaErrorInvalidValue;
  r.allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned) {
  if (!is_pinned_range(host_ptr)) return fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer: not pinned memory");
  *device_ptr = host_ptr;  // one address space: mapped memory has the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  const Allocation* a = find(ptr);
  *attributes = {cudaMemoryTypeUnregistered, -1, nullptr, nullptr};
  if (a) {
    attributes->type = a->pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    attributes->device = a->pinned ? 0 : a->device;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = a->pinned ? const_cast<void*>(ptr) : nullptr;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  MT_EMU_STICKY();
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  std::string why;
  if (kind == cudaMemcpyDefault) {
    // direction from the pointers, as with unified addressing
  } else if (!check_side(dst, bytes, dst_device, "the destination", why) ||
             !check_side(src, bytes, src_device, "the source", why)) {
    return fail(cudaErrorInvalidValue, "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes: " + why);
  }
  cudaStream_t s = resolve(stream);
  if (kind == cudaMemcpyHostToDevice && !is_pinned_range(src)) {
    // Pageable source: read now (the driver stages it before returning), so the caller may reuse it.
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    s->push([dst, copy] { std::memcpy(dst, copy->data(), copy->size()); });
    return cudaSuccess;
  }
  s->push([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  if (kind == cudaMemcpyDeviceToHost && !is_pinned_range(dst)) s->drain();  // pageable: returns when done
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  resolve(nullptr)->drain();
  MT_EMU_STICKY();
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  MT_EMU_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(dst, bytes) || !is_device_range(src, bytes))
    return fail(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: a range is not inside one device allocation");
  {
    Runtime& r = rt();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (find(dst)->device != dst_device || find(src)->device != src_device)
      return fail(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: a pointer is not on the device named with it");
  }
  resolve(stream)->push([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  MT_EMU_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(ptr, bytes)) return fail(cudaErrorInvalidValue, "cudaMemsetAsync: not inside one device allocation");
  resolve(stream)->push([ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  if (e == cudaSuccess) resolve(nullptr)->drain();
  return e;
}

// ---- streams and events -------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  MT_EMU_STICKY();
  auto* s = new CUstream_st;
  s->device = t_device;
  s->worker = std::thread([s] { s->run(); });
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(nullptr)");
  stream->drain();  // the work queued before destruction still runs, as on a GPU
  {
    Runtime& r = rt();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::erase(r.streams, stream);
  }
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stop = true;
    stream->changed.notify_all();
  }
  stream->worker.join();
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  resolve(stream)->drain();
  MT_EMU_STICKY();
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  MT_EMU_STICKY();
  return resolve(stream)->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  MT_EMU_STICKY();
  *event = new CUevent_st;
  (*event)->device = t_device;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  // Not freed: a stream may still hold a record or a wait on it, which CUDA allows after destroy.
  // An event is a few dozen bytes; the tests make a few thousand at most.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  MT_EMU_STICKY();
  cudaStream_t s = resolve(stream);
  if (s->device != event->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: the event belongs to device " +
                std::to_string(event->device) + ", the stream to device " + std::to_string(s->device));
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    generation = ++event->recorded;
  }
  s->push([event, generation] { event->reach(generation); });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  MT_EMU_STICKY();
  std::lock_guard<std::mutex> lock(event->mutex);
  return event->reached >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    target = event->recorded;
  }
  event->wait_for(target);
  MT_EMU_STICKY();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  MT_EMU_STICKY();
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    target = event->recorded;  // the record made before this call, not later ones
  }
  resolve(stream)->push([event, target] { event->wait_for(target); });
  return cudaSuccess;
}
