// What this build and this machine offer in CUDA, asked from code that builds with or without the CUDA
// backend (mini_train's --gpus checks, --env). In a build without CUDA every answer is "none".
#pragma once

#include <string>

namespace mt {

// Whether this build contains the CUDA backend (CMake found nvcc; MT_CUDA not OFF).
bool cuda_is_built();
// GPUs usable by this process: 0 without the CUDA backend, without a driver, or without a GPU.
int cuda_device_count();
// "NVIDIA H200, 139.8 GiB, compute 9.0" for --env and errors; throws when there is no such device.
std::string cuda_device_description(int device);
// Why cuda_device_count() is 0: "" when the build has CUDA and the runtime found no failure (no GPU,
// or GPUs found), else one sentence: no CUDA backend in this build, or cudaGetDeviceCount's error
// with the driver's and runtime's CUDA versions (a driver older than the toolkit is not "no GPU").
std::string cuda_unavailable_reason();
// Whether this build has ProcessGroupNCCL (CMake found NCCL; MT_NCCL not OFF).
bool nccl_is_built();

}  // namespace mt
