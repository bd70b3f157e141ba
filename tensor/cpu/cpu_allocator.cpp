// The CPU allocator: 64-byte aligned blocks from the C heap. It does no caching of its own: glibc's
// malloc already keeps small freed blocks in per-thread caches (tcache), so a tiny tensor costs
// about one malloc.
//
// Why not std::aligned_alloc: in glibc (2.36 here) aligned_alloc/memalign bypass the tcache and
// split a larger chunk on every call; measured, aligned_alloc(64, 64) + free takes ~35 ns against
// ~8 ns for malloc + free, a quarter of the whole cost of adding two 16-element tensors. So we
// over-allocate by 64 bytes with plain malloc, round the pointer up to the next multiple of 64 and
// keep malloc's pointer in the 8 bytes just below the aligned block, where deallocate finds it:
//
//   raw = malloc(size + 64)        aligned = (raw + 64) & ~63        ((void**)aligned)[-1] = raw
//   |<-- 16..64 bytes gap -->|<-- size bytes, 64-byte aligned -->|
//
// (malloc returns at least 16-byte aligned memory, so the gap is 16 to 64 bytes: there is always
// room for the pointer.)
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

  // A 0-byte tensor still gets a real block, so every storage has a unique, freeable pointer.
  void* allocate(size_t nbytes) override {
    MT_CHECK(nbytes <= SIZE_MAX - 2 * kAlignment, "cpu allocator: cannot allocate ", nbytes, " bytes");
    void* raw = std::malloc(nbytes + kAlignment);
    MT_CHECK(raw != nullptr, "out of memory: could not allocate ", nbytes, " bytes on the CPU");
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw) + kAlignment) & ~uintptr_t{kAlignment - 1};
    void* ptr = reinterpret_cast<void*>(aligned);
    static_cast<void**>(ptr)[-1] = raw;
    return ptr;
  }
  void deallocate(void* ptr, size_t /*nbytes*/) override {
    if (ptr != nullptr) std::free(static_cast<void**>(ptr)[-1]);
  }
};

}  // namespace

// Made on first use and never destroyed: a tensor living at namespace scope in another file may be
// freed during exit after this file's statics are gone, and must still find its allocator.
Allocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator;
  return *allocator;
}

}  // namespace mt
