// The CUDA emulator's stand-in for cuda_bf16.h: the bfloat16 conversions the emulated cuBLAS
// (emu_cublas.cpp) reads and writes 16-bit matrices with, written from the format (the upper 16
// bits of a float32; round to nearest even) and from the toolkit's documented behaviour: every NaN
// becomes 0x7FFF, CUDA's canonical NaN. Plain integer code, independent of tensor/half.h (whose NaN
// is PyTorch's 0xFFFF): the GEMM tests compare the two.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t bits) { return __nv_bfloat16{bits}; }

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {0x7fffu};
  const uint32_t kept = x >> 16, rest = x & 0xffffu;
  // Above half way, or exactly half way with an odd kept part: round up (a carry may reach the
  // exponent, and from the largest finite value, infinity).
  return {static_cast<uint16_t>(kept + ((rest > 0x8000u || (rest == 0x8000u && (kept & 1u))) ? 1u : 0u))};
}

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t x = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
