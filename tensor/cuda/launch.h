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

// Vectorised loads: a contiguous run is read as 16-byte packs (float4-sized) when every pointer is
// 16-byte aligned. Elements per pack for a type of `element_size` bytes.
constexpr int kPackBytes = 16;
inline bool is_pack_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPackBytes == 0; }

}  // namespace mt::cuda
