// The parts of the CUDA backend that are plain C++ and run on any machine: the strided indexer the
// elementwise kernels use (checked against the CPU backend's strided loop), launch geometry, the
// caching allocator's bookkeeping (driven with malloc/free), and what cuda_info reports. Kernels
// themselves are tested against the CPU in tests/cuda/ (needs a GPU).
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "tensor/caching_allocator.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cuda/indexer.h"
#include "tensor/cuda/launch.h"
#include "tensor/cuda_info.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

// Offsets the CPU's strided_loop visits for (out, in), in visit order: row-major over the shape.
std::vector<std::array<int64_t, 2>> cpu_offsets(const Tensor& out, const Tensor& in) {
  std::vector<std::array<int64_t, 2>> seen;
  const float* in0 = in.data_ptr<float>();
  float* out0 = out.data_ptr<float>();
  cpu::strided_loop(
      out.sizes(),
      [&](int64_t n, const std::array<int64_t, 2>& s, float* o, const float* x) {
        for (int64_t i = 0; i < n; ++i) seen.push_back({o + i * s[0] - out0, x + i * s[1] - in0});
      },
      cpu::operand<float>(out), cpu::operand<const float>(in));
  return seen;
}

void check_indexer_matches_cpu(const Tensor& out, const Tensor& in) {
  const auto ix = cuda::make_indexer<2>(out.sizes(), {out.strides().begin(), in.strides().begin()});
  const auto expected = cpu_offsets(out, in);
  REQUIRE(static_cast<int64_t>(expected.size()) == out.numel());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t off[2];
    ix.offsets(i, off);
    CHECK(off[0] == expected[i][0]);
    CHECK(off[1] == expected[i][1]);
  }
}

Tensor iota(Shape s) { return raw::reshape(raw::cast(arange(s.numel()), kFloat32), s); }

}  // namespace

TEST_CASE("the CUDA indexer maps linear indices to the offsets the CPU's strided loop visits") {
  // contiguous, transposed, broadcast (stride 0), sliced with a step, permuted 3-D, size-1 dims
  check_indexer_matches_cpu(empty({2, 3, 4}), iota({2, 3, 4}));
  check_indexer_matches_cpu(empty({3, 2}), raw::transpose(iota({2, 3}), 0, 1));
  check_indexer_matches_cpu(empty({4, 5}), raw::expand(iota({5}), {4, 5}));
  check_indexer_matches_cpu(empty({4, 5}), raw::expand(iota({4, 1}), {4, 5}));
  check_indexer_matches_cpu(empty({3, 2}), raw::slice(iota({6, 2}), 0, 0, 6, 2));
  check_indexer_matches_cpu(empty({4, 2, 3}), raw::permute(iota({2, 3, 4}), {2, 0, 1}));
  check_indexer_matches_cpu(empty({1, 3, 1, 2}), raw::transpose(iota({1, 2, 1, 3}), 1, 3));
  // a strided output (the in-place copy_ into a transposed view)
  check_indexer_matches_cpu(raw::transpose(empty({3, 4}), 0, 1), iota({4, 3}));
  check_indexer_matches_cpu(empty({}), iota({}));  // 0-dim: one element at offset 0
}

TEST_CASE("the CUDA indexer simplifies like the CPU loop: contiguous is one unit run, bias stays two dims") {
  const Shape sizes{8, 16, 4};
  const Shape dense = contiguous_strides(sizes);
  auto ix = cuda::make_indexer<2>(sizes, {dense.begin(), dense.begin()});
  CHECK(ix.ndim == 1);
  CHECK(ix.sizes[0] == 8 * 16 * 4);
  CHECK(cuda::is_unit_run(ix));

  const Shape out_strides{5, 1}, bias_strides{0, 1};
  const auto bias = cuda::make_indexer<2>(Shape{4, 5}, {out_strides.begin(), bias_strides.begin()});
  CHECK(bias.ndim == 2);
  CHECK(!cuda::is_unit_run(bias));
  int64_t off[2];
  bias.offsets(13, off);  // row 2, column 3
  CHECK(off[0] == 13);
  CHECK(off[1] == 3);
}

TEST_CASE("launch geometry: enough blocks for n elements, capped for grid-stride loops, never zero") {
  using cuda::elementwise_geometry;
  CHECK(elementwise_geometry(0, 132).blocks == 1);
  CHECK(elementwise_geometry(1, 132).blocks == 1);
  CHECK(elementwise_geometry(256, 132).blocks == 1);
  CHECK(elementwise_geometry(257, 132).blocks == 2);
  CHECK(elementwise_geometry(257, 132).threads == 256);
  const auto huge = elementwise_geometry(int64_t{1} << 40, 132);
  CHECK(huge.blocks == 132 * cuda::kBlocksPerMultiprocessor);
  // every element is covered: blocks * threads * iterations >= n, for the capped case too
  CHECK(static_cast<int64_t>(huge.blocks) * huge.threads > 0);

  const auto short_rows = cuda::row_geometry(1000, 10, 132);
  CHECK(short_rows.threads_per_row == cuda::kWarpSize);
  CHECK(short_rows.blocks == 125);  // 8 rows per 256-thread block
  const auto long_rows = cuda::row_geometry(3, 100000, 132);
  CHECK(long_rows.threads_per_row == cuda::kThreadsPerBlock);
  CHECK(long_rows.blocks == 3);
  CHECK(cuda::row_geometry(0, 5, 132).blocks == 1);
}

namespace {
// BlockCache over malloc/free, counting raw calls.
struct MallocCache {
  int mallocs = 0, frees = 0;
  std::set<void*> live_segments;
  BlockCache cache{[this](size_t n) {
                     ++mallocs;
                     void* p = std::malloc(n);
                     live_segments.insert(p);
                     return p;
                   },
                   [this](void* p, size_t) {
                     ++frees;
                     live_segments.erase(p);
                     std::free(p);
                   },
                   "test cache"};
};
}  // namespace

TEST_CASE("split reductions: few outputs with long rows spread over the GPU, in non-empty chunks") {
  using cuda::split_geometry;
  // A loss mean on an H200: 1 output of 40960 elements gets 10 chunks of 4096 (no more: each
  // chunk must be worth a block); 4 M elements get 1024 splits (the cap, beyond 132 SMs x 8).
  auto one = split_geometry(1, 40960, 132, cuda::kMinSplitChunk);
  CHECK(one.splits == 10);
  CHECK(one.chunk == 4096);
  CHECK(split_geometry(1, int64_t{1} << 22, 132, cuda::kMinSplitChunk).splits == 1024);
  // The bias gradient of (4096, 4096): 16 column blocks, rows split 16 ways into 256 blocks.
  const auto bias = split_geometry(16, 4096, 132, cuda::kMinColumnChunk);
  CHECK(bias.splits == 16);
  CHECK(bias.chunk == 256);
  // Enough blocks already, or rows too short: one pass.
  CHECK(split_geometry(132 * 8, 1 << 20, 132, cuda::kMinSplitChunk).splits == 1);
  CHECK(split_geometry(1, 8191, 132, cuda::kMinSplitChunk).splits == 1);
  // Chunks cover the row exactly, and none is empty.
  for (int64_t r : {8192, 10000, 300000, 1234567})
    for (int64_t blocks : {1, 3, 40}) {
      const auto g = split_geometry(blocks, r, 2, cuda::kMinSplitChunk);
      CHECK(g.chunk * g.splits >= r);
      CHECK(g.chunk * (g.splits - 1) < r);
    }
}

TEST_CASE("the caching allocator rounds sizes and picks segment sizes by pool") {
  CHECK(BlockCache::round_size(0) == 512);
  CHECK(BlockCache::round_size(1) == 512);
  CHECK(BlockCache::round_size(512) == 512);
  CHECK(BlockCache::round_size(513) == 1024);
  CHECK(BlockCache::segment_size(512) == (2u << 20));
  CHECK(BlockCache::segment_size(1u << 20) == (2u << 20));               // largest small request
  CHECK(BlockCache::segment_size((1u << 20) + 512) == (2u << 20));       // large, rounded to 2 MiB
  CHECK(BlockCache::segment_size((3u << 20) + 512) == (4u << 20));
}

TEST_CASE("the caching allocator carves small blocks from one segment and reuses freed ones") {
  MallocCache m;
  void* a = m.cache.allocate(100, 1);
  void* b = m.cache.allocate(1000, 1);
  void* c = m.cache.allocate(4096, 1);
  CHECK(m.mallocs == 1);  // all three from one 2 MiB segment
  CHECK(static_cast<char*>(b) - static_cast<char*>(a) == 512);
  CHECK(static_cast<char*>(c) - static_cast<char*>(b) == 1024);
  CHECK(m.cache.stats().bytes_in_use == 512 + 1024 + 4096);
  CHECK(m.cache.stats().bytes_reserved == (2u << 20));

  m.cache.deallocate(b);
  void* b2 = m.cache.allocate(900, 1);  // the freed 1024-byte hole is the best fit
  CHECK(b2 == b);
  CHECK(m.cache.stats().cache_hits >= 1);
  m.cache.deallocate(a);
  m.cache.deallocate(b2);
  m.cache.deallocate(c);
  CHECK(m.cache.stats().bytes_in_use == 0);
  // Everything merged back into one free segment, which empty_cache returns.
  CHECK(m.cache.empty_cache() == (2u << 20));
  CHECK(m.frees == 1);
  CHECK(m.live_segments.empty());
  CHECK(m.cache.stats().bytes_reserved == 0);
}

TEST_CASE("the caching allocator makes no raw allocation in a steady-state loop") {
  MallocCache m;
  const std::vector<size_t> step_sizes = {40, 4096, 128, 3u << 20, 40, 640 * 1024, 7u << 20, 12};
  for (int step = 0; step < 20; ++step) {
    std::vector<void*> live;
    for (size_t n : step_sizes) live.push_back(m.cache.allocate(n, 7));
    for (void* p : live) m.cache.deallocate(p);
    if (step == 1) {
      const CacheStats s = m.cache.stats();
      CHECK(s.raw_allocations == static_cast<uint64_t>(m.mallocs));
    }
  }
  const CacheStats s = m.cache.stats();
  CHECK(m.mallocs <= 4);  // one small segment, three large ones; never more after the first step
  CHECK(s.raw_allocations == static_cast<uint64_t>(m.mallocs));
  CHECK(s.allocations == 20 * step_sizes.size());
  CHECK(s.cache_hits >= 19 * step_sizes.size());
  CHECK(s.bytes_in_use == 0);
  CHECK(s.peak_bytes_in_use >= (3u << 20) + (7u << 20));
}

TEST_CASE("the caching allocator splits large segments and merges the halves again") {
  MallocCache m;
  void* big = m.cache.allocate(8u << 20, 1);
  m.cache.deallocate(big);
  void* first = m.cache.allocate(3u << 20, 1);   // split: 5 MiB stay free
  void* second = m.cache.allocate(4u << 20, 1);  // from the rest, no new segment
  CHECK(m.mallocs == 1);
  CHECK(second == static_cast<char*>(first) + (3u << 20));
  m.cache.deallocate(first);
  m.cache.deallocate(second);
  void* whole = m.cache.allocate(8u << 20, 1);  // merged back: the whole segment again
  CHECK(whole == big);
  CHECK(m.mallocs == 1);
  m.cache.deallocate(whole);
}

TEST_CASE("the caching allocator keeps blocks with their stream") {
  MallocCache m;
  void* on_one = m.cache.allocate(1000, 1);
  m.cache.deallocate(on_one);
  void* on_two = m.cache.allocate(1000, 2);  // must not reuse stream 1's free block
  CHECK(m.mallocs == 2);
  CHECK(on_two != on_one);
  void* again_one = m.cache.allocate(1000, 1);
  CHECK(again_one == on_one);
  m.cache.deallocate(on_two);
  m.cache.deallocate(again_one);
  CHECK_THROWS_WITH_AS(m.cache.deallocate(on_one), doctest::Contains("does not own"), Error);
}

TEST_CASE("the caching allocator empties its cache and retries when the raw allocator runs out") {
  int budget = 1;  // the raw allocator can hold one segment at a time
  int live = 0;
  BlockCache cache(
      [&](size_t n) -> void* {
        if (live >= budget) return nullptr;
        ++live;
        return std::malloc(n);
      },
      [&](void* p, size_t) {
        --live;
        std::free(p);
      },
      "tiny device");
  void* a = cache.allocate(100, 1);
  cache.deallocate(a);  // cached: the segment is still held
  void* b = cache.allocate(5u << 20, 1);  // needs a new segment: the cached one is released first
  CHECK(live == 1);
  CHECK(cache.stats().raw_frees == 1);
  CHECK_THROWS_WITH_AS(cache.allocate(100, 1), doctest::Contains("out of memory on tiny device"), Error);
  cache.deallocate(b);
}

TEST_CASE("cuda_info answers consistently with what this build has") {
  if (!cuda_is_built()) {
    CHECK(cuda_device_count() == 0);
    CHECK(!nccl_is_built());
    CHECK_THROWS_WITH_AS(cuda_device_description(0), doctest::Contains("no CUDA backend"), Error);
  } else {
    CHECK(cuda_device_count() >= 0);  // 0 here without a GPU; never throws
    if (cuda_device_count() == 0)
      CHECK_THROWS_WITH_AS(zeros({1}, {.device = cuda_device(0)}), doctest::Contains("no CUDA GPU is visible"), Error);
    else
      CHECK(!cuda_device_description(0).empty());
  }
}
