// Note [Small blocks are recycled per thread]
// Every op result is two heap blocks (its TensorImpl, and its Storage with small bytes inline: Note
// [Small bytes inline]), every recorded op a node, every tracked result an AutogradMeta: 22 blocks
// in a seed step (bench/README.md), all freed again by the next step. glibc's malloc keeps freed
// blocks in a per-thread cache too, but its path costs about 130 instructions per malloc and free
// (callgrind, glibc 2.36: `malloc`, `free`, `_int_free`), about 15 % of the seed step. So the blocks
// of these objects come from lists of our own: one singly linked list per 64-byte size class and
// thread, a freed block pushed on the front, the next allocation of that class popping it. Each is
// a handful of instructions and touches no shared state.
//
// Bounds: at most kSmallBlocksPerClass blocks per class wait in a thread's lists (a step frees a
// few dozen), and above kLargestSmallBlock bytes a block goes straight to the heap, so a thread
// keeps at most 64 blocks x (64 + 128 + ... + 1024 bytes), about 540 KB, and in practice the few
// KB of one step. A block freed on another thread (a gradient freed by DDP's communication
// thread) joins that thread's lists; when a thread ends, its lists go back to the heap.
//
// Under AddressSanitizer the lists are bypassed: a recycled block would hide a use after free from
// it, and finding those is what the sanitizer build is for.
#include "tensor/small_blocks.h"

#include <new>

#include "tensor/check.h"

namespace mt::detail {
namespace {

constexpr size_t kClassBytes = 64;
constexpr size_t kClasses = kLargestSmallBlock / kClassBytes;  // class c holds blocks of (c + 1) * 64 bytes

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRecycle = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kRecycle = false;
#else
constexpr bool kRecycle = true;
#endif
#else
constexpr bool kRecycle = true;
#endif

struct FreeBlock {
  FreeBlock* next;
};

// Trivially destructible, so reading it costs no guard check: the fast paths touch only this.
struct FreeLists {
  FreeBlock* head[kClasses];
  unsigned count[kClasses];
  bool owned;   // the thread's ListsOwner below exists, to hand the lists back at thread exit
  bool ending;  // the thread's lists were handed back; free what comes now straight to the heap
};
thread_local FreeLists lists{};

// Hands a thread's lists back to the heap when it ends. Touched only when a thread first keeps a
// block, so a thread that never frees one pays nothing.
struct ListsOwner {
  bool armed = false;
  ~ListsOwner() {
    for (size_t c = 0; c < kClasses; ++c) {
      while (FreeBlock* b = lists.head[c]) {
        lists.head[c] = b->next;
        ::operator delete(b);
      }
      lists.count[c] = 0;
    }
    lists.ending = true;
  }
};
thread_local ListsOwner owner;

size_t size_class(size_t bytes) { return (bytes - 1) / kClassBytes; }

// A block from the heap, with the CPU allocator's one-line error when there is no memory left.
[[gnu::noinline]] void* fresh_block(size_t bytes) {
  void* block = ::operator new(bytes, std::nothrow);
  MT_CHECK(block != nullptr, "out of memory: could not allocate ", bytes, " bytes on the CPU");
  return block;
}

}  // namespace

void* allocate_small(size_t bytes) {
  if (!kRecycle || bytes == 0 || bytes > kLargestSmallBlock) return fresh_block(bytes);
  const size_t c = size_class(bytes);
  if (FreeBlock* b = lists.head[c]) {
    lists.head[c] = b->next;
    --lists.count[c];
    return b;
  }
  return fresh_block((c + 1) * kClassBytes);
}

// The first block a thread keeps: the first use of a thread_local with a destructor registers it.
[[gnu::noinline]] static void own_lists() {
  owner.armed = true;
  lists.owned = true;
}

void free_small(void* block, size_t bytes) noexcept {
  if (!kRecycle || bytes == 0 || bytes > kLargestSmallBlock) return ::operator delete(block);
  const size_t c = size_class(bytes);
  if (lists.ending || lists.count[c] == kSmallBlocksPerClass) [[unlikely]]
    return ::operator delete(block);
  if (!lists.owned) [[unlikely]]
    own_lists();
  auto* b = static_cast<FreeBlock*>(block);
  b->next = lists.head[c];
  lists.head[c] = b;
  ++lists.count[c];
}

bool small_blocks_recycled() { return kRecycle; }

size_t small_blocks_cached_on_this_thread() {
  size_t n = 0;
  for (size_t c = 0; c < kClasses; ++c) n += lists.count[c];
  return n;
}

}  // namespace mt::detail
