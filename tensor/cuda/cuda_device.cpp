// Devices and their compute streams (tensor/cuda/cuda_device.h). The streams are made on first use
// and live until the process exits: destroying them from a static destructor could run after the
// CUDA runtime has already shut down.
#include "tensor/cuda/cuda_device.h"

#include <memory>
#include <mutex>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_error.h"

namespace mt::cuda {

int device_count() {
  // Asked once: the count cannot change within a process (CUDA_VISIBLE_DEVICES is read at start-up).
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no GPU: clear the error, report none
      return 0;
    }
    return n;
  }();
  return count;
}

namespace {
void check_device(int device) {
  const int n = device_count();
  MT_CHECK(n > 0, "cuda:", device, " requested but no CUDA GPU is visible to this process "
           "(check the driver and CUDA_VISIBLE_DEVICES)");
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
