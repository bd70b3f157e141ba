// CUDA devices and streams as the rest of minitrain sees them: how many GPUs, what they are, which
// one is current (DeviceGuard), and the stream each device's kernels are queued on.
//
//   DeviceGuard guard(1);                 // device 1 is current until guard goes out of scope
//   cudaStream_t s = current_stream(1);   // where the CUDA backend queues work for cuda:1
//
// One compute stream per device (the backend's): ops on a device run in the order they were issued,
// so no op needs to synchronise with another. Communication (ProcessGroupNCCL) uses its own stream,
// ordered after this one with events (Note [Comm stream] in
// distributed/process_group/nccl/process_group_nccl.cpp).
// Only compiled into CUDA builds; code that must also build without CUDA uses tensor/cuda_info.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace mt::cuda {

// GPUs the driver shows this process (0 when there is no driver or no GPU; never throws).
int device_count();
// Why device_count() is 0 when cudaGetDeviceCount itself failed (a driver older than the toolkit,
// no driver, a broken install), with the driver's and runtime's CUDA versions; empty when it
// succeeded (Note [Why no GPU] in cuda_device.cpp). no_gpu_reason() is the sentence for errors.
const std::string& device_count_problem();
std::string no_gpu_reason();

struct DeviceProperties {
  std::string name;            // "NVIDIA H200"
  size_t total_memory = 0;     // bytes
  int multiprocessors = 0;
  int major = 0, minor = 0;    // compute capability, e.g. 9.0
};
DeviceProperties properties(int device);

// The current device of the calling thread (cudaGetDevice), and a checked setter.
int current_device();
void set_device(int device);  // throws naming the device count when out of range

// RAII: makes `device` current, restores the previous one on destruction.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// The stream the CUDA backend queues device `device`'s work on (created on first use, non-blocking
// with respect to the legacy default stream).
cudaStream_t current_stream(int device);
// Waits for everything queued on device's compute stream.
void synchronize(int device);

}  // namespace mt::cuda
