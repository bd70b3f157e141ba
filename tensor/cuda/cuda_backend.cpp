// CudaBackend's construction, the per-device table behind mt::backend(cuda(i)), and synchronize.
#include "tensor/cuda/cuda_backend.h"

#include <memory>
#include <mutex>

#include "tensor/cuda/cuda_allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_error.h"

namespace mt::cuda {

CudaBackend::CudaBackend(int device)
    : device_(device),
      stream_(current_stream(device)),
      multiprocessors_(properties(device).multiprocessors),
      allocator_(&device_allocator(device)) {}

void CudaBackend::synchronize() { cuda::synchronize(device_); }


namespace detail {

// One backend per visible device, each made on its first use and never destroyed (tensors freed
// during exit still reach their allocator through them). Lazily per device on purpose: making a
// backend creates a stream, hence a CUDA context, and a DDP worker that owns cuda:3 must not spend
// memory on contexts for the other GPUs.
Backend& backend_for_device(int index) {
  struct Slot {
    std::once_flag once;
    CudaBackend* backend = nullptr;
  };
  static const int count = device_count();
  static Slot* slots = new Slot[count > 0 ? count : 1];
  MT_CHECK(count > 0, "cuda:", index, " requested but no CUDA GPU is visible to this process (", no_gpu_reason(),
           ")");
  MT_CHECK(index >= 0 && index < count, "cuda:", index, " does not exist: this process sees ", count,
           " CUDA device", count == 1 ? "" : "s", " (cuda:0 .. cuda:", count - 1, ")");
  Slot& slot = slots[index];
  std::call_once(slot.once, [&] { slot.backend = new CudaBackend(index); });
  return *slot.backend;
}

}  // namespace detail
}  // namespace mt::cuda
