// BlockCache: the bookkeeping of a caching allocator, with no device code in it. The CUDA allocator
// (tensor/cuda/cuda_allocator.cpp) is this class plus cudaMalloc/cudaFree; the pinned host allocator
// is this class plus cudaHostAlloc/cudaFreeHost; the CPU test drives it with malloc/free.
//
// Why cache: cudaMalloc and cudaFree are slow (tens of microseconds to milliseconds) and cudaFree
// synchronises the whole device. A training step frees and re-allocates the same sizes every step,
// so after the first steps every request is served from memory the cache already holds.
//
// Note [Caching allocator]
//   sizes     requests round up to a multiple of 512 bytes (kRoundBytes). Requests of at most 1 MiB
//             (kSmallRequest) are "small" and are carved from 2 MiB segments (kSmallSegment); larger
//             ones get a segment of their size rounded up to 2 MiB. The two pools never mix, so small
//             tensors cannot fragment the big segments.
//   reuse     a request takes the smallest free block of its pool and stream that fits (best fit);
//             if that block is bigger, it is split and the rest stays free (small pool: any rest of
//             at least 512 bytes; large pool: a rest of more than 1 MiB, else the slack is kept).
//   free      a freed block merges with free neighbours from the same segment, so split memory
//             becomes one big block again. Segments are returned to the device only by empty_cache()
//             (or when an allocation fails, which empties the cache and retries once).
//   streams   every block belongs to the stream it was allocated for. A freed block is reused only by
//             requests for the same stream: work on one stream runs in issue order, so a new owner's
//             kernels run after the old owner's last kernel, and the host need not wait for the GPU
//             before recycling memory. Work on another stream could overtake and clobber it.
//   limit     set_limit(bytes) refuses a request that would take bytes_in_use past it, with
//             OutOfMemoryError, before looking for a block (Note [Memory limit] in tensor/memory.h).
// It does not know what a stream or device is: a stream is an opaque integer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

namespace mt {

struct CacheStats {
  size_t bytes_in_use = 0;        // sum of rounded sizes of live blocks
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;      // sum of segment sizes held from the raw allocator
  uint64_t raw_allocations = 0;   // calls to the raw allocator (cudaMalloc): segments made
  uint64_t raw_frees = 0;
  uint64_t allocations = 0;       // requests served
  uint64_t cache_hits = 0;        // requests served from a cached free block
  size_t limit = 0;               // set_limit's cap on bytes_in_use; 0: none
};

class BlockCache {
 public:
  using StreamId = uintptr_t;
  // raw_alloc returns nullptr (or throws std::bad_alloc) when out of memory, and throws anything
  // else for other failures, which allocate() passes on unchanged (Note [Only out of memory is
  // retried], caching_allocator.cpp); raw_free gets the pointer and size.
  using RawAlloc = std::function<void*(size_t)>;
  using RawFree = std::function<void(void*, size_t)>;

  static constexpr size_t kRoundBytes = 512;
  static constexpr size_t kSmallRequest = size_t{1} << 20;   // 1 MiB
  static constexpr size_t kSmallSegment = size_t{2} << 20;   // 2 MiB
  static constexpr size_t kLargeRound = size_t{2} << 20;     // large segments: multiples of 2 MiB

  // `name` goes into error messages ("CUDA device 0", "pinned host memory").
  BlockCache(RawAlloc raw_alloc, RawFree raw_free, std::string_view name);
  // Returns every segment to the raw allocator. Blocks still in use at that point are a bug in the
  // owner (the CUDA allocators are never destroyed, see cuda_allocator.cpp).
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of at least nbytes (0 allowed: still a unique pointer) for work on `stream`. `tag` is
  // the owner's, kept with the block and handed back by deallocate (the CPU allocator's MemoryKind).
  void* allocate(size_t nbytes, StreamId stream, uint8_t tag = 0);
  // Returns a pointer from allocate() to the cache, and the tag it was allocated with. Throws on a
  // pointer it does not know.
  uint8_t deallocate(void* ptr);
  // Changes the tag of the live block at ptr; returns its old tag, or -1 when ptr is not one.
  int retag(const void* ptr, uint8_t tag);
  // Note [Memory limit] (tensor/memory.h): requests that would take bytes_in_use past `bytes` throw
  // OutOfMemoryError; 0 lifts the cap.
  void set_limit(size_t bytes);
  // Releases every segment that is entirely free. Returns the bytes released.
  size_t empty_cache();
  // True when ptr is a live block from this cache.
  bool owns(const void* ptr) const;
  CacheStats stats() const;

  // The size a request is served with, and the segment a fresh one gets (tested directly).
  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block {
    char* ptr;
    size_t size;
    StreamId stream;
    bool small;              // which pool its segment belongs to
    bool allocated = false;
    uint8_t tag = 0;         // the owner's, while allocated
    Block* prev = nullptr;   // neighbours in address order within one segment
    Block* next = nullptr;
  };
  // Free blocks ordered by (stream, size, address): lower_bound finds the best fit on a stream.
  struct ByStreamSize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, ByStreamSize>;

  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }
  Block* find_free(size_t size, StreamId stream, bool small);
  Block* new_segment(size_t size, StreamId stream, bool small);
  void split(Block* block, size_t size);
  size_t release_free_segments();

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  std::string name_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<const void*, Block*> live_;  // allocated blocks by pointer
  CacheStats stats_;
};

}  // namespace mt
