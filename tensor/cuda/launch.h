// Launch geometry: how many blocks of how many threads a kernel gets. Host-only plain C++ (no CUDA
// headers), so tests/tensor/test_cuda_host_math.cpp checks it on the CPU.
//
// Elementwise kernels use grid-stride loops: thread t of G handles elements t, t + G, t + 2G, ...
// so any grid size is correct, and the grid is capped at a few waves of blocks per multiprocessor
// instead of one thread per element. That bounds launch size for huge tensors (and the 2^31 - 1
// limit on gridDim.x never comes near) while still filling the GPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mt::cuda {

constexpr int kThreadsPerBlock = 256;  // 8 warps: a good default occupancy on sm_80/sm_90
constexpr int kWarpSize = 32;
// Resident blocks per SM we aim for: 2048 threads per SM / 256 = 8, times 4 waves.
constexpr int64_t kBlocksPerMultiprocessor = 32;

struct LaunchGeometry {
  unsigned blocks = 1;
  unsigned threads = kThreadsPerBlock;
};

// Blocks for n elements (one per thread, before grid-striding), capped by the device's size.
// n == 0 still gets one block so callers need not special-case it (kernels check their bounds).
inline LaunchGeometry elementwise_geometry(int64_t n, int multiprocessors, int threads = kThreadsPerBlock) {
  const int64_t wanted = (n + threads - 1) / threads;
  const int64_t cap = std::max<int64_t>(1, multiprocessors) * kBlocksPerMultiprocessor;
  return {static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, cap)), static_cast<unsigned>(threads)};
}

// Row-wise kernels (reductions, softmax) give each row either one warp (short rows: 8 rows per
// 256-thread block) or a whole block (long rows), chosen by the row length.
constexpr int64_t kWarpPerRowLimit = 1024;
struct RowGeometry {
  unsigned blocks = 1;
  unsigned threads = kThreadsPerBlock;
  int threads_per_row = kWarpSize;  // kWarpSize or kThreadsPerBlock
};
inline RowGeometry row_geometry(int64_t rows, int64_t row_length, int multiprocessors) {
  RowGeometry g;
  if (row_length <= kWarpPerRowLimit) {
    g.threads_per_row = kWarpSize;
    constexpr int64_t rows_per_block = kThreadsPerBlock / kWarpSize;
    g.blocks = static_cast<unsigned>(
        std::clamp<int64_t>((rows + rows_per_block - 1) / rows_per_block, 1,
                            std::max<int64_t>(1, multiprocessors) * kBlocksPerMultiprocessor));
  } else {
    g.threads_per_row = kThreadsPerBlock;
    g.blocks = static_cast<unsigned>(
        std::clamp<int64_t>(rows, 1, std::max<int64_t>(1, multiprocessors) * kBlocksPerMultiprocessor));
  }
  return g;
}

// Note [Split reductions]: a reduction with few outputs and long rows would leave the GPU idle with
// one block (or warp) per output: a loss mean is 1 output (1 block of 132 SMs on an H200), a bias
// gradient sum over dim 0 of (4096, 4096) 16 blocks of column threads. Such reductions split each
// row into `splits` chunks of `chunk` elements: pass 1 combines every chunk into a partial
// (outputs x splits accumulators, in a temporary), pass 2 combines each output's partials. Split
// only while there are fewer blocks than a full GPU (kFullBlocksPerMultiprocessor per SM) and every
// chunk stays long enough to be worth a block (kMinSplitChunk elements for row blocks,
// kMinColumnChunk rows for column threads). splits == 1: no split, one pass.
constexpr int64_t kFullBlocksPerMultiprocessor = 8;  // 8 x 256 threads = 2048, a full SM
constexpr int64_t kMinSplitChunk = 4096;
constexpr int64_t kMinColumnChunk = 256;
constexpr int64_t kMaxSplits = 1024;
struct SplitGeometry {
  int64_t splits = 1;
  int64_t chunk = 0;  // elements (rows, for columns) per split; the last one may be shorter
};
// blocks: the blocks the unsplit kernel would get; min_chunk: kMinSplitChunk or kMinColumnChunk.
inline SplitGeometry split_geometry(int64_t blocks, int64_t row_length, int multiprocessors, int64_t min_chunk) {
  const int64_t full = std::max<int64_t>(1, multiprocessors) * kFullBlocksPerMultiprocessor;
  SplitGeometry g;
  g.chunk = row_length;
  if (blocks >= full || row_length < 2 * min_chunk) return g;
  const int64_t by_gpu = (full + blocks - 1) / std::max<int64_t>(blocks, 1);
  g.splits = std::min({by_gpu, row_length / min_chunk, kMaxSplits});
  if (g.splits < 2) return {1, row_length};
  g.chunk = (row_length + g.splits - 1) / g.splits;
  g.splits = (row_length + g.chunk - 1) / g.chunk;  // no empty last chunk
  return g;
}

// Vectorised loads: a contiguous run is read as 16-byte packs (float4-sized) when every pointer is
// 16-byte aligned. Elements per pack for a type of `element_size` bytes.
constexpr int kPackBytes = 16;
inline bool is_pack_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPackBytes == 0; }

}  // namespace mt::cuda
