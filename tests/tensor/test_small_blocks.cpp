// Small blocks (tensor/small_blocks.h, Note [Small blocks are recycled per thread]): a freed block
// is handed out again by the next allocation of its size class on the same thread, the lists stay
// bounded, and blocks move between threads safely.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "minitrain.h"
#include "tensor/small_blocks.h"

using namespace mt::detail;

TEST_CASE("small blocks: usable, aligned, and each freed block is reused by its own size class") {
  for (size_t bytes : {1, 8, 63, 64, 65, 200, 511, 1000, 1024, 1025, 4096}) {
    void* p = allocate_small(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0);
    std::memset(p, 0xab, bytes);  // all of it is ours (ASan checks the bounds in its build)
    free_small(p, bytes);
  }
  if (!small_blocks_recycled()) {  // a sanitizer build: nothing is kept, nothing to check
    MESSAGE("skipped the reuse checks: a sanitizer build recycles no small blocks");
    return;
  }
  void* a = allocate_small(200);  // class 193..256 bytes
  void* b = allocate_small(100);  // class 65..128 bytes
  const size_t before = small_blocks_cached_on_this_thread();
  free_small(a, 200);
  free_small(b, 100);
  CHECK(small_blocks_cached_on_this_thread() == before + 2);
  CHECK(allocate_small(250) == a);  // same class as 200: a comes back
  CHECK(allocate_small(65) == b);
  CHECK(small_blocks_cached_on_this_thread() == before);
  free_small(a, 250);
  free_small(b, 65);
  // Larger than the lists recycle: straight back to the heap.
  void* big = allocate_small(kLargestSmallBlock + 1);
  free_small(big, kLargestSmallBlock + 1);
  CHECK(small_blocks_cached_on_this_thread() == before + 2);
}

TEST_CASE("small blocks: a thread keeps at most kSmallBlocksPerClass per class") {
  std::thread([] {  // a fresh thread, so its lists start empty
    CHECK(small_blocks_cached_on_this_thread() == 0);
    std::vector<void*> blocks;
    for (size_t i = 0; i < 3 * kSmallBlocksPerClass; ++i) blocks.push_back(allocate_small(300));
    for (void* p : blocks) free_small(p, 300);
    CHECK(small_blocks_cached_on_this_thread() == (small_blocks_recycled() ? kSmallBlocksPerClass : 0));
  }).join();
}

TEST_CASE("small blocks: tensors made on one thread and dropped on another keep their values") {
  // Tensors made here and dropped on a worker, as DDP's communication thread drops gradients, and the
  // other way round: each thread's lists take what it frees, and the values are never disturbed.
  std::vector<mt::Tensor> made_here;
  for (int i = 0; i < 200; ++i) made_here.push_back(mt::full({3, 5}, i));
  std::vector<mt::Tensor> made_there;
  std::thread([&] {
    made_here.clear();
    for (int i = 0; i < 200; ++i) made_there.push_back(mt::full({2, 2}, -i));
    CHECK(small_blocks_cached_on_this_thread() <= 2 * kSmallBlocksPerClass);
  }).join();
  for (int i = 0; i < 200; ++i) {
    CHECK(made_there[i].sum().item() == doctest::Approx(-4.0 * i));
    const mt::Tensor y = made_there[i] * 2;  // blocks from this thread's lists, after the worker's
    CHECK(y.sum().item() == doctest::Approx(-8.0 * i));
  }
}
