// What this build and machine offer in CUDA (tensor/cuda_info.h). Compiled into every build: with
// the CUDA backend (MT_HAVE_CUDA) it asks tensor/cuda/, without it every answer is "none".
#include "tensor/cuda_info.h"

#include <cstdio>

#include "tensor/check.h"

#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
#include "tensor/cuda/cuda_device.h"
#endif

namespace mt {

#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA

bool cuda_is_built() { return true; }
int cuda_device_count() { return cuda::device_count(); }
std::string cuda_unavailable_reason() { return cuda::device_count_problem(); }

std::string cuda_device_description(int device) {
  const cuda::DeviceProperties p = cuda::properties(device);  // throws for a missing device
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(p.total_memory) / (1 << 30));
  return p.name + ", " + memory + ", compute " + std::to_string(p.major) + "." + std::to_string(p.minor);
}

#else

bool cuda_is_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "this build has no CUDA backend (configure with -DMT_CUDA=ON where nvcc is found)"; }
std::string cuda_device_description(int device) {
  MT_FAIL("cuda:", device, " requested but this build has no CUDA backend (configure with -DMT_CUDA=ON "
          "on a machine with nvcc)");
}

#endif

bool nccl_is_built() {
#if defined(MT_HAVE_NCCL) && MT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace mt
