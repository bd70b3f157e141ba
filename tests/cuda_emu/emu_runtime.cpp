// The CUDA emulator's runtime: devices, errors and memory, answered on the CPU with the semantics
// the backend relies on (docs/gpu.md, "The CUDA emulator"); streams and events are in
// emu_streams.cpp.
//   - cudaMemcpyAsync from pageable host memory reads the source before it returns, and into pageable
//     memory waits for the copy, as the driver does; with pinned memory (cudaHostAlloc) both stay
//     asynchronous: the pinned paths are the ones that need events;
//   - cudaMalloc'd memory starts filled with 0xff bytes (NaN as float, -1 as int64), so reading memory
//     nothing wrote is visible; copies and cuBLAS check that device ranges lie inside one allocation;
//   - errors follow Note [Last error and sticky errors] below: a failing call sets the calling
//     thread's last error; a kernel fault (a barrier not all threads reach, an operand outside its
//     allocation, ...) poisons the context: every later call returns the error, as after an illegal
//     address on a GPU.
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

// Note [Last error and sticky errors]: the CUDA runtime keeps two kinds of error state, and the
// backend's checks depend on both (CUDA Runtime API, "Error Handling": cudaGetLastError,
// cudaPeekAtLastError; CUDA C++ Programming Guide, "Error Checking").
//   - The last error, one per host thread (t_last): every runtime call that fails sets it, and a
//     kernel launch reports a bad configuration only there. cudaGetLastError returns it and resets
//     it to cudaSuccess; cudaPeekAtLastError returns it and leaves it. A call that succeeds does
//     NOT reset it, so an error nobody cleared is reported by the next MT_CUDA_CHECK_LAUNCH after an
//     unrelated, correct launch. cudaErrorNotReady from cudaEventQuery/cudaStreamQuery is such an
//     error here too (Note [Not ready is a last error], emu_streams.cpp).
//   - The sticky error, one per context (Runtime::sticky): a fault inside a kernel (on a GPU an
//     illegal address, here also a barrier not all threads reach). The kernel runs later than its
//     launch, so the fault is seen by the first call made after it happened, normally the next
//     synchronising one (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
//     cudaMemcpy), which waits for the kernel and then returns the fault. From then on every call
//     that queues work, allocates, synchronises or queries returns it, cudaGetLastError and
//     cudaPeekAtLastError included, and nothing clears it: a process on a GPU must exit. The
//     emulator's own tests clear it with mt_emu::reset_context so the next case can run.
// Not modelled: device and version queries (cudaGetDevice, cudaSetDevice, cudaGetDeviceProperties,
// the versions) and the destroy/free-host calls answer normally after a fault.
thread_local cudaError_t t_last = cudaSuccess;

// Every call first returns a poisoned context's error.
cudaError_t sticky() {  // as context_error(), for this file
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.sticky;
}

cudaError_t fail(cudaError_t error, const std::string& detail) { return set_last_error(error, detail); }

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

cudaError_t record_last_error(cudaError_t error) { return t_last = error; }

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
  wait_all_streams();
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.sticky = cudaSuccess;
  r.sticky_detail.clear();
  t_last = cudaSuccess;
}

cudaError_t context_error() { return sticky(); }
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
  wait_all_streams();  // as on a GPU, cudaFree waits for the device
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
  wait_all_streams();
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
  if (kind == cudaMemcpyHostToDevice && !is_pinned_range(src)) {
    // Pageable source: read now (the driver stages it before returning), so the caller may reuse it.
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    enqueue(stream, [dst, copy] { std::memcpy(dst, copy->data(), copy->size()); });
    return cudaSuccess;
  }
  enqueue(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  if (kind == cudaMemcpyDeviceToHost && !is_pinned_range(dst)) wait_stream(stream);  // pageable: returns when done
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  wait_stream(nullptr);
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
  enqueue(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  MT_EMU_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(ptr, bytes)) return fail(cudaErrorInvalidValue, "cudaMemsetAsync: not inside one device allocation");
  enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  if (e == cudaSuccess) wait_stream(nullptr);
  return e;
}

