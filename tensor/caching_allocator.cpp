// BlockCache: free lists, splitting and merging, statistics. See Note [Caching allocator] in
// tensor/caching_allocator.h for the rules; this file is their implementation, under one mutex
// (tensors are freed from any thread: DataLoader workers, the autograd engine, comm watchdogs).
#include "tensor/caching_allocator.h"

#include <algorithm>
#include <new>
#include <tuple>
#include <vector>

#include "tensor/check.h"
#include "tensor/memory.h"

namespace mt {

bool BlockCache::ByStreamSize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

BlockCache::BlockCache(RawAlloc raw_alloc, RawFree raw_free, std::string_view name)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)), name_(name) {}

BlockCache::~BlockCache() {
  for (auto& [ptr, block] : live_) {
    (void)ptr;
    block->allocated = false;  // leaked by the owner: freed with its segment below
  }
  // Every segment is a chain of blocks; walk each chain from its head (prev == nullptr).
  std::vector<Block*> heads;
  for (Pool* p : {&small_pool_, &large_pool_})
    for (Block* b : *p)
      if (b->prev == nullptr) heads.push_back(b);
  for (auto& [ptr, block] : live_)
    if (block->prev == nullptr) heads.push_back(block);
  for (Block* head : heads) {
    size_t total = 0;
    for (Block* b = head; b != nullptr; b = b->next) total += b->size;
    void* base = head->ptr;
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    raw_free_(base, total);
  }
}

size_t BlockCache::round_size(size_t nbytes) {
  if (nbytes == 0) return kRoundBytes;
  MT_CHECK(nbytes <= SIZE_MAX - kLargeRound, "allocator: cannot allocate ", nbytes, " bytes");
  return (nbytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

size_t BlockCache::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

// Best fit: the smallest free block of this stream and pool with size >= `size`.
BlockCache::Block* BlockCache::find_free(size_t size, StreamId stream, bool small) {
  Pool& p = pool(small);
  Block key{nullptr, size, stream, small};
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  p.erase(it);
  return block;
}

BlockCache::Block* BlockCache::new_segment(size_t size, StreamId stream, bool small) {
  const size_t bytes = segment_size(size);
  // Note [Only out of memory is retried]: raw_alloc_ answers nullptr (or std::bad_alloc) when memory
  // is short, and that alone is worth freeing cached segments for. Any other failure propagates as
  // itself: a sticky CUDA error from a crashed kernel makes every cudaMalloc fail, and reporting it
  // as "out of memory" would send the user after their batch size instead of the kernel.
  auto try_alloc = [&]() -> void* {
    try {
      return raw_alloc_(bytes);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  };
  void* ptr = try_alloc();
  if (ptr == nullptr) {
    // Cached but unused segments may be what stands in the way: give them back and try once more.
    release_free_segments();
    ptr = try_alloc();
  }
  MT_CHECK(ptr != nullptr, "out of memory on ", name_, ": could not allocate a segment of ", bytes,
           " bytes for a request of ", size, " bytes (", stats_.bytes_in_use, " bytes in use, ",
           stats_.bytes_reserved, " reserved)");
  ++stats_.raw_allocations;
  stats_.bytes_reserved += bytes;
  return new Block{static_cast<char*>(ptr), bytes, stream, small};
}

// Cuts `block` to `size` bytes when the rest is worth keeping; the rest becomes a free block.
void BlockCache::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  const bool keep_rest = block->small ? rest >= kRoundBytes : rest > kSmallRequest;
  if (!keep_rest) return;
  Block* tail = new Block{block->ptr + size, rest, block->stream, block->small};
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  pool(tail->small).insert(tail);
}

void* BlockCache::allocate(size_t nbytes, StreamId stream, uint8_t tag) {
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallRequest;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stats_.limit > 0 && size > stats_.limit - std::min(stats_.limit, stats_.bytes_in_use))
    detail::fail_with<OutOfMemoryError>(__FILE__, __LINE__, "out of memory: ", name_, " tensors are limited to ",
                                        format_mib(stats_.limit), " (set_memory_limit; mini_train --max-memory), "
                                        "and a request for ", format_mib(size), " came with ",
                                        format_mib(stats_.bytes_in_use), " in use");
  Block* block = find_free(size, stream, small);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    block = new_segment(size, stream, small);
  }
  split(block, size);
  block->allocated = true;
  block->tag = tag;
  live_.emplace(block->ptr, block);
  ++stats_.allocations;
  stats_.bytes_in_use += block->size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return block->ptr;
}

uint8_t BlockCache::deallocate(void* ptr) {
  if (ptr == nullptr) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  MT_CHECK(it != live_.end(), name_, ": deallocate of a pointer this allocator does not own");
  Block* block = it->second;
  const uint8_t tag = block->tag;
  live_.erase(it);
  block->allocated = false;
  stats_.bytes_in_use -= block->size;
  Pool& p = pool(block->small);
  // Merge with free neighbours: absorb the next block, then let the previous block absorb us.
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    p.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    p.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  p.insert(block);
  return tag;
}

int BlockCache::retag(const void* ptr, uint8_t tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return -1;
  const uint8_t old = it->second->tag;
  it->second->tag = tag;
  return old;
}

void BlockCache::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.limit = bytes;
}

// A free block with no neighbours is a whole segment.
size_t BlockCache::release_free_segments() {
  size_t released = 0;
  for (Pool* p : {&small_pool_, &large_pool_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block* b = *it;
      if (b->prev == nullptr && b->next == nullptr) {
        raw_free_(b->ptr, b->size);
        ++stats_.raw_frees;
        stats_.bytes_reserved -= b->size;
        released += b->size;
        delete b;
        it = p->erase(it);
      } else {
        ++it;
      }
    }
  }
  return released;
}

size_t BlockCache::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  return release_free_segments();
}

bool BlockCache::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.count(ptr) != 0;
}

CacheStats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace mt
