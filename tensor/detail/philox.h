// Philox-4x32-10, the block function behind mt::Generator (tensor/generator.h): 128 bits of
// counter and 64 bits of key in, 128 pseudo-random bits out, after Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3" (SC 2011). It is a pure function with no state, so any block can be
// computed on its own: the CPU backend fills tensors with it, and a GPU kernel written from the same
// description reproduces the stream element by element.
// This header only holds the block function; how blocks become floats is in tensor/cpu/cpu_random.cpp.
// It is inline so that tensor fills compute blocks without a call per block, and MT_HOST_DEVICE so that
// the CUDA backend's random kernels (tensor/cuda/cuda_random.cu) run this very code: same seed, same
// numbers on CPU and GPU. (std::array is usable in kernels: nvcc gets --expt-relaxed-constexpr.)
#pragma once

#include <array>
#include <cstdint>

#include "tensor/host_device.h"

namespace mt::detail {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// One round: two 32x32->64 multiplies whose high halves are mixed (xor) with the other words and
// the key, and whose low halves move to new positions. It is a bijection of the counter for any key.
MT_HOST_DEVICE inline PhiloxCounter philox_round(const PhiloxCounter& c, const PhiloxKey& k) {
  constexpr uint64_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  const uint64_t p0 = kM0 * c[0];  // 64-bit products: hi = p >> 32, lo = low 32 bits
  const uint64_t p1 = kM1 * c[2];
  return {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
}

// Ten rounds; between rounds the key is bumped by the Weyl constants (the golden ratio and sqrt(3)
// in 32-bit fixed point), so each round sees a different key.
MT_HOST_DEVICE inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    c = philox_round(c, k);
  }
  return c;
}

// Block `counter` of the stream of `seed`, as Generator::philox defines it:
// key = (low32(seed), high32(seed)); counter words = (low32(counter), high32(counter), 0, 0).
// A 64-bit block counter is enough: at 4 words a block it lasts 2^66 numbers per seed.
MT_HOST_DEVICE inline PhiloxCounter philox_block(uint64_t seed, uint64_t counter) {
  return philox4x32_10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

}  // namespace mt::detail
