// Generator: a seedable source of random numbers that gives the same numbers on every platform.
// It is Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), a
// counter-based generator: the n-th block of four 32-bit outputs is a pure function of (seed, n),
// so a GPU kernel can compute any element independently and match the CPU stream exactly.
// The state is just (seed, offset); saving and restoring it makes training resume bit-for-bit.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/host_device.h"

namespace mt {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  // Number of 4x32-bit blocks consumed so far.
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }

  // Reserves `blocks` consecutive blocks and returns the first block's counter.
  uint64_t advance(uint64_t blocks) {
    uint64_t first = offset_;
    offset_ += blocks;
    return first;
  }
  // The four outputs of block `counter` under `seed`.
  static std::array<uint32_t, 4> philox(uint64_t seed, uint64_t counter);

  // Convenience draws on the host (each consumes one block).
  uint64_t next_u64();
  double next_double();  // U[0, 1)

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator that factories use when none is passed (seed 0 until manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

// u32 -> U[0,1) with 24 (float) or 53 (double, from two u32) random bits. Shared with the CUDA
// random kernels, so both backends map words to numbers identically.
MT_HOST_DEVICE inline float uniform_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
MT_HOST_DEVICE inline double uniform_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace mt
