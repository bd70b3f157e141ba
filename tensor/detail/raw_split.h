// Splitting a raw op's outer loop across the intra-op threads: the convolutions' loops over samples
// (tensor/raw_conv.cpp) and over Winograd's sample groups (tensor/raw_winograd.cpp).
//
// Note [Samples on the threads]: a convolution runs one sample (or one group of samples) at a time
// through a few kernels: im2col or Winograd's input transform, a GEMM, the output step. Each of
// those kernels can split its own work across the threads, but that puts one parallel region per
// kernel per sample, each handing its output from one core to the other: measured on the CNN step
// (bench/threads.sh, 2 vCPUs with 2 MiB of L2 each), the transforms and GEMMs took 20-55 % more
// CPU time at 2 threads than at 1, and the 1 -> 32 layer's per-sample GEMMs were too small to split
// at all, so they ran on one thread. for_items runs whole samples as the chunks of one
// parallel_for instead, when there are enough of them to share out evenly and their buffers are
// small; a sample's buffers then stay in the cache of the core that made them. With few items, or
// large ones (a few large images), the items run in order on the calling thread and their kernels
// split as before.
// Bits: an item's kernels are the same calls either way (inside a chunk their own parallel_for
// runs serially, tensor/parallel.h), so the choice, made by the thread count, cannot change the
// result. Where items add into one result (a weight gradient summed over samples), the items are
// cut into Strands fixed by the shape: each strand adds its items in order into its own partial
// sum, and the partials are then added in strand order, so the bits are the same at any thread
// count (they differ from one running sum over all items by rounding only).
// Only the CPU backend runs these loops (the CUDA one takes the batched path,
// tensor/detail/raw_conv_batched.h, and has no Winograd kernels), so the CPU pool is the right one here.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor/parallel.h"
#include "tensor/raw_ops.h"

namespace mt::raw {

// item(i) for every i in [0, count), where one item allocates about item_bytes of buffers: as the
// chunks of one parallel_for when every thread gets at least two items (an odd item out then costs
// at most a third of a thread's share) and the threads' buffers together stay within
// kItemsBytes, else in order here. The bound keeps memory from growing with the thread count
// where it would matter (im2col's columns of one 224x224 sample are ~100 MB): items that large
// split their own kernels well anyway, and no longer fit a core's cache, which was the point.
constexpr int64_t kItemsBytes = int64_t{64} << 20;

template <typename F>
void for_items(int64_t count, int64_t item_bytes, const F& item) {
  const auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) item(i);
  };
  const int64_t threads = get_num_threads();
  if (count >= 2 * threads && threads * item_bytes <= kItemsBytes) parallel_for(count, 1, run);
  else run(0, count);
}

// [0, items) cut into `count` consecutive strands, one partial sum each (Note [Samples on the
// threads]): one strand per item up to kMax, and no more than kBytes of partial sums. Both bounds
// depend on the shape alone.
struct Strands {
  static constexpr int64_t kMax = 64;
  static constexpr int64_t kBytes = int64_t{32} << 20;

  Strands(int64_t items, int64_t partial_bytes)
      : items(items), count(std::clamp<int64_t>(std::min(items, kBytes / std::max<int64_t>(partial_bytes, 1)), 1, kMax)) {}

  int64_t first(int64_t k) const { return k * items / count; }  // strand k: items [first(k), first(k + 1))
  // The total of partial (count, ...): the partials added in strand order, or the one partial.
  Tensor total(const Tensor& partial) const {
    return count == 1 ? reshape(partial, Shape(partial.sizes().begin() + 1, partial.sizes().end())) : sum(partial, {0});
  }
  int64_t items, count;
};

}  // namespace mt::raw
