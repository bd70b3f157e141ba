// The device error slot (Note [Device errors] in tensor/cuda/cuda_error.h).
#include "tensor/cuda/cuda_error.h"

#include <mutex>

#include "tensor/cuda/cuda_check.h"

namespace mt::cuda::detail {
namespace {

struct Slot {
  DeviceErrorSlot* host = nullptr;    // what the host reads
  DeviceErrorSlot* device = nullptr;  // the same memory as kernels address it
};

// Portable: one slot serves every device. Never freed (kernels may still hold the pointer at exit).
Slot& slot() {
  static Slot s = [] {
    Slot made;
    MT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&made.host), sizeof(DeviceErrorSlot),
                                cudaHostAllocMapped | cudaHostAllocPortable));
    *made.host = DeviceErrorSlot{};
    MT_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&made.device), made.host, 0));
    return made;
  }();
  return s;
}

const char* op_name(int32_t op) {
  switch (static_cast<IndexOp>(op)) {
    case IndexOp::IndexSelect: return "index_select";
    case IndexOp::IndexAdd: return "index_add";
    case IndexOp::Gather: return "gather";
    case IndexOp::ScatterAdd: return "scatter_add";
    case IndexOp::IntegerDivision: return "div";
  }
  return "an index op";
}

}  // namespace

DeviceErrorSlot* device_error_slot() { return slot().device; }

void check_device_errors() {
  static std::mutex mutex;  // two threads syncing at once report the error once
  std::lock_guard<std::mutex> lock(mutex);
  volatile DeviceErrorSlot* s = slot().host;
  if (s->flag == 0) [[likely]]
    return;
  const DeviceErrorSlot e{s->flag, s->op, s->index, s->position, s->bound};
  s->flag = 0;
  MT_CHECK(static_cast<IndexOp>(e.op) != IndexOp::IntegerDivision,
           "div on CUDA: integer division by zero (the quotient was set to 0). Reported at the next "
           "synchronisation after the op (Note [Device errors] in tensor/cuda/cuda_error.h)");
  MT_FAIL(op_name(e.op), " on CUDA: index ", e.index, " at position ", e.position,
          " is out of range for a dim of size ", e.bound, " (valid range [0, ", e.bound,
          ")); the element was skipped. Reported at the next synchronisation after the op "
          "(Note [Device errors] in tensor/cuda/cuda_error.h)");
}

}  // namespace mt::cuda::detail
