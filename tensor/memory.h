// Tensor memory per device as a training run sees it: the bytes its tensors hold now and at their
// peak, what that peak was made of (Note [Memory kinds]), and a cap past which an allocation is
// refused (Note [Memory limit]). CPU tensors are counted by the CPU allocator
// (tensor/cpu/cpu_allocator.cpp), CUDA tensors by their device's caching allocator
// (tensor/caching_allocator.h), which counts the peak but not the kinds.
//
//   set_memory_limit(kCPU, parse_memory_size("300M", "--max-memory"));
//   { MemoryKindGuard kind(MemoryKind::kOptimizerState); opt.step(); }   // what the step allocates
//   TensorMemory m = tensor_memory(kCPU);   // m.peak, m.peak_by_kind[...]
//
// Not here: the bytes a process holds outside tensors (the allocators' caches, the heap, code).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tensor/check.h"
#include "tensor/device.h"

namespace mt {

// Note [Memory kinds]: what a tensor's bytes are for, decided when they are allocated, by the kind
// this thread is in (MemoryKindGuard, kOther outside any). The trainer marks building the model
// (parameters) and the optimizer step (optimizer state, and what the step holds while it runs);
// DistributedDataParallel marks its buckets and ZeRO its kept shards (gradients), FSDP its shards and
// gathered units (parameters) and each unit's flat gradients (gradients); without DDP,
// AccumulateGrad recounts the fresh gradient it keeps as a leaf's .grad (set_memory_kind, below:
// blocks of 128 KiB and more). Everything else, activations saved for backward, their gradients,
// batches, data sets, is kOther. The CPU allocator
// keeps a count per kind and copies the four counts whenever the total reaches a new peak, so the
// peak comes with what it was made of. Under several threads the copy may be off by what another
// thread allocates at the same moment.
enum class MemoryKind : uint8_t { kOther = 0, kParameters, kGradients, kOptimizerState };
constexpr size_t kMemoryKinds = 4;
// "parameters", "gradients", "optimizer state", "activations and the rest".
const char* memory_kind_name(MemoryKind kind);

// The kind this thread's allocations are counted as, until the guard ends (guards nest).
MemoryKind current_memory_kind();
class MemoryKindGuard {
 public:
  explicit MemoryKindGuard(MemoryKind kind);
  ~MemoryKindGuard();
  MemoryKindGuard(const MemoryKindGuard&) = delete;
  MemoryKindGuard& operator=(const MemoryKindGuard&) = delete;

 private:
  MemoryKind previous_;
};

// Counts the CPU allocator's block at `data` (nbytes, as allocated) as `kind` from now on, for a
// tensor whose purpose shows only after it was made: autograd's AccumulateGrad takes a fresh
// gradient as the leaf's .grad without a copy. True for a block of 128 KiB and more from the CPU
// allocator (Note [Large CPU blocks are cached]); false, changing nothing, for anything else
// (smaller blocks keep the kind they were made with: their bytes carry no record to look up).
bool set_memory_kind(const void* data, size_t nbytes, MemoryKind kind);

// The tensors of one device. Bytes as requested (CPU) or as rounded by the caching allocator (CUDA).
struct TensorMemory {
  size_t in_use = 0;
  size_t peak = 0;   // the most in use at once, since the start (or reset_cpu_peak_memory)
  size_t limit = 0;  // Note [Memory limit]; 0: none
  bool has_kinds = false;  // peak_by_kind is counted (CPU)
  std::array<size_t, kMemoryKinds> peak_by_kind{};  // at the peak, indexed by MemoryKind
};
TensorMemory tensor_memory(Device device);

// Note [Memory limit]: set_memory_limit(device, bytes) caps the bytes this process's tensors on
// `device` may hold at once (0: no cap). An allocation that would take them past it throws
// OutOfMemoryError, naming the limit, the request and what is in use, before any memory is taken:
// as a GPU that is full would, but at a size of the user's choosing and on any device, so a run
// can be shown not to fit (mini_train --max-memory: plain DDP stops where ZeRO trains). The count
// is the tensors' own bytes (tensor_memory's in_use), not what the allocators cache.
void set_memory_limit(Device device, size_t bytes);

class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {  // the CPU allocator's side of the two above (tensor/cpu/cpu_allocator.cpp)
TensorMemory cpu_tensor_memory();
void set_cpu_memory_limit(size_t bytes);
}  // namespace detail

// "300M", "2G", "512K", "1.5G" or a number of bytes; K, M, G, T are powers of 1024, an optional
// trailing "B" or "iB" is accepted. Throws naming `what` (the flag or variable) for anything else.
size_t parse_memory_size(std::string_view text, std::string_view what);
// "300.0 MiB": bytes for messages.
std::string format_mib(size_t bytes);

}  // namespace mt
