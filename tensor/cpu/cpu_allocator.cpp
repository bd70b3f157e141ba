// The CPU allocator: 64-byte aligned blocks. Small blocks come from the C heap; large ones from a
// cache of our own (Note [Large CPU blocks are cached]).
//
// Small blocks: glibc's malloc already keeps small freed blocks in per-thread caches (tcache), so a
// tiny tensor costs about one malloc. Why not std::aligned_alloc: in glibc (2.36 here)
// aligned_alloc/memalign bypass the tcache and split a larger chunk on every call; measured,
// aligned_alloc(64, 64) + free takes ~35 ns against ~8 ns for malloc + free, a quarter of the whole
// cost of adding two 16-element tensors. So we over-allocate by 64 bytes with plain malloc, round
// the pointer up to the next multiple of 64 and keep malloc's pointer in the 8 bytes just below the
// aligned block, where deallocate finds it:
//
//   raw = malloc(size + 64)        aligned = (raw + 64) & ~63        ((void**)aligned)[-1] = raw
//   |<-- 16..64 bytes gap -->|<-- size bytes, 64-byte aligned -->|
//
// (malloc returns at least 16-byte aligned memory, so the gap is 16 to 64 bytes: there is always
// room for the pointer, and for the block's MemoryKind in the word below it, Note [Memory kinds]
// in tensor/memory.h.)
//
// Note [Large CPU blocks are cached]: glibc serves blocks above its mmap threshold (128 KiB, rising
// as it sees big frees) with mmap and returns them with munmap, and trims the top of its heap when
// much is free. A training step frees and re-allocates the same large tensors every step (the MLP's
// 784x256 gradient, activations of a big batch), so each step would map fresh pages and take a page
// fault per 4 KiB on first touch: measured here, the 784-256-10 MLP's DDP step went from 1.75 ms to
// 3.2 ms that way. Blocks of kLargeBlock bytes and more therefore go through a BlockCache (the
// bookkeeping the CUDA allocator uses too; tensor/caching_allocator.h), which keeps freed memory
// mapped and hands it out again: after the first steps, no step maps anything. The price is that
// freed large blocks stay with the process until cpu_empty_cache().
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "tensor/caching_allocator.h"
#include "tensor/check.h"
#include "tensor/memory.h"
#include "tensor/small_blocks.h"
#include "tensor/storage.h"

namespace mt {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kLargeBlock = 128 * 1024;  // Note [Large CPU blocks are cached]

// The cache's memory: 64-byte aligned (BlockCache's sizes are multiples of 512, so every block it
// carves out of a segment stays aligned).
BlockCache& large_blocks() {
  static BlockCache* cache = new BlockCache(
      [](size_t nbytes) { return std::aligned_alloc(kAlignment, nbytes); },
      [](void* ptr, size_t) { std::free(ptr); }, "CPU memory");
  return *cache;
}

// cpu_memory_stats() and tensor_memory(kCPU): relaxed, since the counts are read only as numbers,
// never to order memory. Per kind (Note [Memory kinds], tensor/memory.h) the bytes in use, and
// their copy taken at the total's peak.
std::atomic<size_t> bytes_in_use{0}, peak_bytes_in_use{0}, limit_bytes{0};
std::atomic<size_t> kind_in_use[kMemoryKinds], kind_at_peak[kMemoryKinds];

void copy_kinds_at_peak() {
  for (size_t k = 0; k < kMemoryKinds; ++k)
    kind_at_peak[k].store(kind_in_use[k].load(std::memory_order_relaxed), std::memory_order_relaxed);
}

// Counts nbytes of `kind` in, or throws OutOfMemoryError (counting nothing) when they would take the
// total past the limit (Note [Memory limit]). Called before the memory is taken.
void count_allocation(size_t nbytes, MemoryKind kind) {
  const size_t now = bytes_in_use.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  const size_t limit = limit_bytes.load(std::memory_order_relaxed);
  if (limit > 0 && now > limit) [[unlikely]] {
    bytes_in_use.fetch_sub(nbytes, std::memory_order_relaxed);
    detail::fail_with<OutOfMemoryError>(__FILE__, __LINE__, "out of memory: CPU tensors are limited to ",
                                        format_mib(limit), " (set_memory_limit; mini_train --max-memory), and a "
                                        "request for ", format_mib(nbytes), " came with ", format_mib(now - nbytes),
                                        " in use");
  }
  kind_in_use[static_cast<size_t>(kind)].fetch_add(nbytes, std::memory_order_relaxed);
  size_t peak = peak_bytes_in_use.load(std::memory_order_relaxed);
  while (now > peak) {
    if (peak_bytes_in_use.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
      copy_kinds_at_peak();
      break;
    }
  }
}

void count_free(size_t nbytes, MemoryKind kind) {
  kind_in_use[static_cast<size_t>(kind)].fetch_sub(nbytes, std::memory_order_relaxed);
  bytes_in_use.fetch_sub(nbytes, std::memory_order_relaxed);
}

class CpuAllocator final : public Allocator {
 public:
  constexpr CpuAllocator() = default;

  // A 0-byte tensor still gets a real block, so every storage has a unique, freeable pointer. The
  // block's MemoryKind goes with it: in the cache's tag, or in the gap's second word (kind_slot).
  void* allocate(size_t nbytes) override {
    const MemoryKind kind = current_memory_kind();
    count_allocation(nbytes, kind);
    if (nbytes >= kLargeBlock) {
      try {
        return large_blocks().allocate(nbytes, /*stream=*/0, static_cast<uint8_t>(kind));
      } catch (...) {
        count_free(nbytes, kind);
        throw;
      }
    }
    void* raw = std::malloc(nbytes + kAlignment);
    if (raw == nullptr) {
      count_free(nbytes, kind);
      MT_FAIL("out of memory: could not allocate ", nbytes, " bytes on the CPU");
    }
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw) + kAlignment) & ~uintptr_t{kAlignment - 1};
    void* ptr = reinterpret_cast<void*>(aligned);
    static_cast<void**>(ptr)[-1] = raw;
    kind_slot(ptr) = static_cast<uintptr_t>(kind);
    return ptr;
  }
  // Storage passes back the size it asked for, which says which of the two the block came from.
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    if (nbytes >= kLargeBlock) {
      count_free(nbytes, static_cast<MemoryKind>(large_blocks().deallocate(ptr)));
    } else {
      count_free(nbytes, static_cast<MemoryKind>(kind_slot(ptr)));
      std::free(static_cast<void**>(ptr)[-1]);
    }
  }

 private:
  // The word below malloc's pointer: the gap is at least 16 bytes (see the top of the file).
  static uintptr_t& kind_slot(void* ptr) { return static_cast<uintptr_t*>(ptr)[-2]; }
};

// Note [Small bytes inline]: a tensor's storage is a shared_ptr<Storage> (one heap block: the
// reference counts and the Storage) and its bytes another block. For a small CPU tensor the bytes
// go into the first block, after the Storage: one block per tensor instead of two, which is most
// of what a tiny op allocates (bench/ seed step); the block comes from this thread's free lists
// (Note [Small blocks are recycled per thread], tensor/small_blocks.cpp). std::allocate_shared
// lets the allocator size the block, so InlineBytesAllocator asks for the Storage's block plus
// room for the bytes at the next 64-byte boundary; the Storage finds them just past itself. They
// count in cpu_memory_stats() like any other block, and are freed with the block. Above
// kInlineBytes a tensor takes its own block as before, so a small view cannot keep a large block's
// memory.
constexpr size_t kInlineBytes = 512;

template <typename T>
struct InlineBytesAllocator {
  using value_type = T;
  size_t nbytes;     // the tensor's bytes, placed after the Storage
  MemoryKind kind;   // kept in the control block's copy of this allocator until the free
  explicit InlineBytesAllocator(size_t n) : nbytes(n), kind(current_memory_kind()) {}
  template <typename U>
  InlineBytesAllocator(const InlineBytesAllocator<U>& o) : nbytes(o.nbytes), kind(o.kind) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    count_allocation(nbytes, kind);
    void* block = detail::allocate_small(block_bytes(n));  // Note [Small blocks are recycled per thread]
    return static_cast<T*>(block);
  }
  void deallocate(T* block, size_t n) {
    count_free(nbytes, kind);
    detail::free_small(block, block_bytes(n));
  }
  size_t block_bytes(size_t n) const { return n * sizeof(T) + kAlignment - 1 + nbytes; }
  template <typename U>
  bool operator==(const InlineBytesAllocator<U>& o) const { return nbytes == o.nbytes; }
};

}  // namespace

Storage::Storage(InlineBytes, size_t nbytes)
    : data_(reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(this + 1) + kAlignment - 1) & ~uintptr_t{kAlignment - 1})),
      nbytes_(nbytes),
      device_(kCPU),
      allocator_(nullptr) {}

std::shared_ptr<Storage> make_storage(size_t nbytes, Device device, Allocator& allocator) {
  if (device.is_cpu() && &allocator == &cpu_allocator() && nbytes <= kInlineBytes) {
    return std::allocate_shared<Storage>(InlineBytesAllocator<Storage>(nbytes), Storage::InlineBytes{}, nbytes);
  }
  return std::make_shared<Storage>(nbytes, device, allocator);
}

// Made on first use and never destroyed: a tensor living at namespace scope in another file may be
// freed during exit after this file's statics are gone, and must still find its allocator.
Allocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator;
  return *allocator;
}

CacheStats cpu_cache_stats() { return large_blocks().stats(); }
size_t cpu_empty_cache() { return large_blocks().empty_cache(); }

CpuMemoryStats cpu_memory_stats() {
  return {.bytes_in_use = bytes_in_use.load(std::memory_order_relaxed),
          .peak_bytes_in_use = peak_bytes_in_use.load(std::memory_order_relaxed)};
}

void reset_cpu_peak_memory() {
  peak_bytes_in_use.store(bytes_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
  copy_kinds_at_peak();
}

namespace detail {

TensorMemory cpu_tensor_memory() {
  TensorMemory m{.in_use = bytes_in_use.load(std::memory_order_relaxed),
                 .peak = peak_bytes_in_use.load(std::memory_order_relaxed),
                 .limit = limit_bytes.load(std::memory_order_relaxed),
                 .has_kinds = true};
  for (size_t k = 0; k < kMemoryKinds; ++k) m.peak_by_kind[k] = kind_at_peak[k].load(std::memory_order_relaxed);
  return m;
}

void set_cpu_memory_limit(size_t bytes) { limit_bytes.store(bytes, std::memory_order_relaxed); }

}  // namespace detail

bool set_memory_kind(const void* data, size_t nbytes, MemoryKind kind) {
  if (nbytes < kLargeBlock) return false;
  const int old = large_blocks().retag(data, static_cast<uint8_t>(kind));
  if (old < 0) return false;
  kind_in_use[static_cast<size_t>(kind)].fetch_add(nbytes, std::memory_order_relaxed);
  kind_in_use[static_cast<size_t>(old)].fetch_sub(nbytes, std::memory_order_relaxed);
  return true;
}

namespace detail {

}  // namespace detail

}  // namespace mt
