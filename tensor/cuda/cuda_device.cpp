// Devices and their compute streams (tensor/cuda/cuda_device.h). The streams are made on first use
// and live until the process exits: destroying them from a static destructor could run after the
// CUDA runtime has already shut down.
#include "tensor/cuda/cuda_device.h"

#include <memory>
#include <mutex>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_error.h"

namespace mt::cuda {

namespace {

// Note [Why no GPU]: cudaGetDeviceCount fails for two very different reasons. No GPU, or no driver
// at all, is normal on a CPU machine: the count is 0. A driver older than the toolkit this build
// was compiled with (cudaErrorInsufficientDriver), a broken install or a GPU in a bad state also
// makes the count 0, but must not read as "no GPU": the reason is kept, and every "no CUDA GPU"
// error, mt::cuda_unavailable_reason() and the GPU tests' skip line print it with both versions.
struct DeviceCount {
  int count = 0;
  std::string problem;  // empty when cudaGetDeviceCount succeeded
};

std::string versions() {
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is loaded
  (void)cudaRuntimeGetVersion(&runtime);
  auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "driver supports CUDA " + (driver == 0 ? std::string("(no driver loaded)") : dotted(driver)) +
         ", this build's runtime is CUDA " + dotted(runtime);
}

const DeviceCount& counted() {
  // Asked once: the count cannot change within a process (CUDA_VISIBLE_DEVICES is read at start-up).
  static const DeviceCount result = [] {
    DeviceCount c;
    const cudaError_t status = cudaGetDeviceCount(&c.count);
    if (status == cudaSuccess) return c;
    (void)cudaGetLastError();  // the error is kept in c.problem instead
    c.count = 0;
    c.problem = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
                cudaGetErrorString(status) + "; " + versions() + ")";
    if (status == cudaErrorInsufficientDriver)
      c.problem += ": the NVIDIA driver is missing or older than the CUDA toolkit this was built with; "
                   "update the driver or build with an older toolkit";
    return c;
  }();
  return result;
}

}  // namespace

int device_count() { return counted().count; }

const std::string& device_count_problem() { return counted().problem; }

std::string no_gpu_reason() {
  const std::string& problem = device_count_problem();
  return problem.empty() ? "cudaGetDeviceCount reports 0 devices; check CUDA_VISIBLE_DEVICES" : problem;
}

namespace {
void check_device(int device) {
  const int n = device_count();
  MT_CHECK(n > 0, "cuda:", device, " requested but no CUDA GPU is visible to this process (", no_gpu_reason(), ")");
  MT_CHECK(device >= 0 && device < n, "cuda:", device, " does not exist: this process sees ", n,
           " CUDA device", n == 1 ? "" : "s", " (cuda:0 .. cuda:", n - 1, ")");
}
}  // namespace

DeviceProperties properties(int device) {
  check_device(device);
  cudaDeviceProp p{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return {p.name, p.totalGlobalMem, p.multiProcessorCount, p.major, p.minor};
}

int current_device() {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int device) {
  check_device(device);
  MT_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}

// Destructors must not throw; restoring a device that was current a moment ago cannot fail short of
// a broken context, which the next checked call reports.
DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

namespace {
struct DeviceStream {
  std::once_flag once;
  cudaStream_t stream = nullptr;
};
DeviceStream* device_streams() {
  static DeviceStream* streams = new DeviceStream[device_count() > 0 ? device_count() : 1];
  return streams;
}
}  // namespace

cudaStream_t current_stream(int device) {
  check_device(device);
  DeviceStream& s = device_streams()[device];
  std::call_once(s.once, [&] {
    DeviceGuard guard(device);
    // Non-blocking: no implicit ordering with the legacy default stream, which other libraries
    // (or a stray cudaMemcpy) may use; our ordering is explicit (one stream, plus events).
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  });
  return s.stream;
}

void synchronize(int device) {
  MT_CUDA_CHECK(cudaStreamSynchronize(current_stream(device)));
  detail::check_device_errors();
}

}  // namespace mt::cuda
