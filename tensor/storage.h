// Storage: refcounted bytes on one device, freed through the Allocator that made them.
// Views of a tensor share one Storage. The storage also carries the version counter that autograd
// uses to detect in-place changes of saved tensors: an in-place op on any view bumps it, which is
// more conservative than tracking each view separately and just as correct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/device.h"

namespace mt {

// Allocates device memory. One per device type (CPU: 64-byte aligned heap; CUDA: caching allocator).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

// 64-byte aligned (one cache line, one AVX-512 register) so vector loads never split lines. Blocks
// of 128 KiB and more are cached (Note [Large CPU blocks are cached] in tensor/cpu/cpu_allocator.cpp).
Allocator& cpu_allocator();
struct CacheStats;  // tensor/caching_allocator.h
// The CPU cache of large blocks: its statistics, and giving its free memory back to the system
// (returns the bytes released).
CacheStats cpu_cache_stats();
size_t cpu_empty_cache();
// Bytes of every live CPU tensor block, small and large, as requested (not rounded), and the most
// there were since the last reset: what a test reads to see what a phase of training allocated
// (tests/distributed/test_zero.cpp: the optimizer state per rank). Two relaxed atomic adds per
// allocation and free.
struct CpuMemoryStats {
  size_t bytes_in_use = 0;
  size_t peak_bytes_in_use = 0;
};
CpuMemoryStats cpu_memory_stats();
void reset_cpu_peak_memory();  // peak := what is in use now

class Storage;
// The storage of a new tensor of nbytes on device: from the device's allocator, or, for a small
// CPU tensor, with its bytes in the storage's own heap block (Note [Small bytes inline],
// tensor/cpu/cpu_allocator.cpp).
std::shared_ptr<Storage> make_storage(size_t nbytes, Device device, Allocator& allocator);

class Storage {
 public:
  Storage(size_t nbytes, Device device, Allocator& allocator)
      : data_(allocator.allocate(nbytes)), nbytes_(nbytes), device_(device), allocator_(&allocator) {}
  // CPU bytes that make_storage places after this object, in the block that holds it: freeing the
  // block frees them (Note [Small bytes inline]). Only make_storage can make the tag, since only
  // its block has the room.
  class InlineBytes {
    InlineBytes() = default;
    friend std::shared_ptr<Storage> make_storage(size_t nbytes, Device device, Allocator& allocator);
  };
  Storage(InlineBytes, size_t nbytes);
  ~Storage() {
    if (allocator_ != nullptr && data_ != nullptr) allocator_->deallocate(data_, nbytes_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // Note [Storage that lets go of its bytes]: FullyShardedDataParallel (distributed/zero/fsdp.h)
  // frees a unit's parameters between its forward and its backward while autograd still holds
  // them: saved tensors keep this Storage (and check later that it is the same one, with the same
  // version), so the Storage object must stay while its bytes go. release() gives the bytes back to
  // the allocator and leaves data() null, nbytes() and the version as they were (PyTorch's
  // storage.resize_(0) does the same job); take_bytes(from) adopts the bytes of another storage of
  // the same size and device, e.g. the output of an all-gather, leaving `from` released. The
  // version is not bumped: the contract of whoever releases is to put back the very values that
  // were there, which is what a re-gathered shard is, so a graph recorded before the release is
  // still right. Tensor::raw_data refuses a released storage. Inline bytes (a small CPU tensor,
  // Note [Small bytes inline]) cannot be released. Defined in tensor/storage.cpp.
  bool released() const { return data_ == nullptr && nbytes_ > 0; }
  void release();
  void take_bytes(Storage& from);

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Allocator* allocator_;
  uint64_t version_ = 0;
};

}  // namespace mt
