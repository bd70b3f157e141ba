// The CPU allocator: 64-byte aligned blocks from the C heap. It does no caching: glibc's malloc
// already keeps small freed blocks in per-thread bins, so a tiny tensor costs about one malloc.
#include <cstdint>
#include <cstdlib>

#include "tensor/check.h"
#include "tensor/storage.h"

namespace mt {
namespace {

constexpr size_t kAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  constexpr CpuAllocator() = default;

  // std::aligned_alloc wants a size that is a multiple of the alignment. A 0-byte tensor still
  // gets a real (64-byte) block, so every storage has a unique, freeable pointer.
  void* allocate(size_t nbytes) override {
    MT_CHECK(nbytes <= SIZE_MAX - kAlignment, "cpu allocator: cannot allocate ", nbytes, " bytes");
    const size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    MT_CHECK(ptr != nullptr, "out of memory: could not allocate ", nbytes, " bytes on the CPU");
    return ptr;
  }
  void deallocate(void* ptr, size_t /*nbytes*/) override { std::free(ptr); }
};

constinit CpuAllocator allocator;

}  // namespace

Allocator& cpu_allocator() { return allocator; }

}  // namespace mt
