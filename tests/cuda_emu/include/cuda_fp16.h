// The CUDA emulator's stand-in for cuda_fp16.h: the float16 conversions the emulated NCCL (float16
// sums) and cuBLAS (float16 GEMMs) use, written from IEEE 754 binary16 (round to nearest even; NaN
// stays NaN, overflow goes to infinity). Plain integer code, independent of tensor/half.h, which the
// kernels and the CPU backend use: the float16 GEMM tests (tests/cuda/test_cuda_lowp.cpp) compare
// the two.
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  uint16_t bits;
};

inline uint16_t __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(uint16_t bits) { return __half{bits}; }

inline __half __float2half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exponent = (x >> 23) & 0xffu, mantissa = x & 0x7fffffu;
  if (exponent == 0xffu) return {static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u))};
  const int e = static_cast<int>(exponent) - 127 + 15;  // binary16 exponent
  if (e >= 31) return {static_cast<uint16_t>(sign | 0x7c00u)};
  // The value as an integer count of the result's last place, with 13+ extra bits to round from.
  uint32_t m = mantissa | (exponent ? 0x800000u : 0u);
  int shift = e > 0 ? 13 : 14 - e;  // subnormal results shift further
  if (shift > 24) return {sign};
  const uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  uint32_t r = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  if (e > 0) r += static_cast<uint32_t>(e) << 10, r -= 0x400u;  // the implicit bit counted once
  return {static_cast<uint16_t>(sign | r)};
}

inline float __half2float(__half h) {
  const uint32_t sign = (h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu, x;
  if (exponent == 0x1fu) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mantissa <<= 1;
        ++e;
      } while ((mantissa & 0x400u) == 0);
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
