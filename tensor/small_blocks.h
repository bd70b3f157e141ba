// Small blocks: the heap blocks of a tensor's bookkeeping (its TensorImpl, a small Storage with its
// bytes, autograd's metadata and nodes), recycled per thread (Note [Small blocks are recycled per
// thread], tensor/small_blocks.cpp).
//
//   auto impl = detail::make_small<TensorImpl>();          // instead of std::make_shared
//   std::allocate_shared<T>(detail::SmallBlockAllocator<T>{}, ...)
//
// A block may be freed on any thread: it joins that thread's lists.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace mt::detail {

// A block of at least `bytes` bytes, aligned for any standard type (16 bytes).
void* allocate_small(size_t bytes);
// Frees a block from allocate_small; `bytes` is what was asked for.
void free_small(void* block, size_t bytes) noexcept;

// Whether freed blocks are kept for reuse: false in a sanitizer build, where every block goes back
// to the heap so that AddressSanitizer sees each use after free.
bool small_blocks_recycled();
// The freed blocks waiting in this thread's lists (for the tests).
size_t small_blocks_cached_on_this_thread();
// Blocks the lists hold at most, per size class and thread, and the largest block they recycle.
inline constexpr size_t kSmallBlocksPerClass = 64;
inline constexpr size_t kLargestSmallBlock = 1024;

template <typename T>
struct SmallBlockAllocator {
  using value_type = T;
  SmallBlockAllocator() = default;
  template <typename U>
  SmallBlockAllocator(const SmallBlockAllocator<U>&) {}  // NOLINT: rebinding, as allocate_shared does
  T* allocate(size_t n) { return static_cast<T*>(allocate_small(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { free_small(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const SmallBlockAllocator<U>&) const { return true; }
};

// std::make_shared, with the object and its reference counts in a recycled block.
template <typename T, typename... Args>
std::shared_ptr<T> make_small(Args&&... args) {
  return std::allocate_shared<T>(SmallBlockAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace mt::detail
