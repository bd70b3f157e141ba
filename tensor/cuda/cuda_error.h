// Errors found inside kernels: an index out of range in index_select / index_add / gather /
// scatter_add, and an integer division by zero (IndexOp::IntegerDivision; the result element is 0). A kernel cannot throw, so it writes what it found into one error slot and skips the
// bad element (no out-of-bounds read or write ever happens); the host reads the slot whenever it waits
// for the GPU anyway, and throws an mt::Error naming the op, the index and the valid range.
//
// Note [Device errors]: the error surfaces at the next synchronisation point, not at the op that
// caused it: mt::cuda::synchronize, Backend::synchronize, and every copy to the host (item(),
// to_vector(), .to(kCPU), printing), which must wait for the GPU to read its result. That is how
// PyTorch's device-side asserts behave too, except that ours leave the CUDA context usable: the slot
// is cleared when it is reported. Checking right after each launch would cost a host-device round
// trip per index op (cross-entropy's gather runs every step).
//
// The slot lives in pinned, mapped host memory (cudaHostAllocMapped): the kernel writes it directly
// over the bus, and the host reads it with no copy, so checking costs one memory read.
#pragma once

#include <cstdint>

namespace mt::cuda::detail {

enum class IndexOp : int32_t { IndexSelect = 1, IndexAdd, Gather, ScatterAdd, IntegerDivision };

struct DeviceErrorSlot {
  int32_t flag;       // 0: no error; set to 1 by the first failing thread (atomicCAS)
  int32_t op;         // IndexOp
  int64_t index;      // the bad index
  int64_t position;   // its position in the index tensor
  int64_t bound;      // the size of the indexed dim: valid indices are [0, bound)
};

// The slot as kernels see it (a device pointer to the mapped host memory). Made on first use.
DeviceErrorSlot* device_error_slot();
// Throws and clears the slot if a kernel reported an error. Call after the GPU work is complete.
void check_device_errors();

#if defined(__CUDACC__)
// First report wins; later ones (other threads, other bad indices) are dropped.
__device__ inline void report_index_error(DeviceErrorSlot* slot, IndexOp op, int64_t index, int64_t position,
                                          int64_t bound) {
  if (atomicCAS(&slot->flag, 0, 1) == 0) {
    slot->op = static_cast<int32_t>(op);
    slot->index = index;
    slot->position = position;
    slot->bound = bound;
    __threadfence_system();
  }
}
#endif

}  // namespace mt::cuda::detail
