// The two 16-bit floating formats, float16 ("half", IEEE 754 binary16) and bfloat16, as plain C++:
// their conversions to and from float32 and the element types mt::Half and mt::BFloat16 that CPU
// kernels read and write. No arithmetic in 16 bits: a kernel widens to float32, computes there and
// rounds the result once (Note [Low-precision compute type], tensor/dtype.h).
//
// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. Largest finite 65504; smallest
// normal 2^-14; subnormals down to 2^-24.
// bfloat16: the upper 16 bits of a float32: 1 sign bit, 8 exponent bits (bias 127), 7 mantissa bits.
// float32's range (largest finite about 3.39e38) with 8 bits of precision.
//
// Narrowing rounds to nearest, ties to even, like the hardware (F16C's VCVTPS2PH with rounding mode
// 0, CUDA's __float2half_rn / __float2bfloat16_rn); overflow gives infinity. NaN gives the bit patterns
// PyTorch 1.13's CPU casts give (tests/tensor/test_lowp_convert.cpp checks all of this against it):
// float16 sign | 0x7E00, bfloat16 0xFFFF (its vectorised cast's NaN, whatever the sign). Widening is
// exact; a float16 NaN keeps its payload with the quiet bit set, a bfloat16 NaN its bits.
#pragma once

#include <bit>
#include <cstdint>

namespace mt {

constexpr float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F)  // infinity, or NaN (made quiet): all exponent bits set in float32 too
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa != 0 ? 0x400000u : 0u) | (mantissa << 13));
  if (exponent != 0)  // normal: rebias 15 -> 127
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
  // Subnormal half = mantissa * 2^-24: normal in float32. Shift the leading 1 up to bit 10.
  int e = -1;
  do {
    ++e;
    mantissa <<= 1;
  } while ((mantissa & 0x400u) == 0);
  return std::bit_cast<float>(sign | static_cast<uint32_t>(112 - e) << 23 | ((mantissa & 0x3FFu) << 13));
}

constexpr uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN: the canonical quiet NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // infinity, or rounds past 65504
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (abs < 0x33000000u) return sign;  // below 2^-25: rounds to zero (exactly 2^-25 ties to even 0)
    // value = m * 2^(e-150) with the implicit bit restored; half subnormal unit is 2^-24.
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // bits of m below the half subnormal unit: 14..24
    const uint32_t kept = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1);
    const uint32_t half_way = 1u << (shift - 1);
    const uint32_t rounded = kept + (rest > half_way || (rest == half_way && (kept & 1u)) ? 1u : 0u);
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias 127 -> 15 and drop 13 mantissa bits, rounding to nearest even. A carry out of the
  // mantissa correctly bumps the exponent (and 65520 and up were caught above).
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rest = rebased & 0x1FFFu;
  uint32_t h = rebased >> 13;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

constexpr float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Drop the low 16 bits, rounding to nearest even: adding 0x7FFF (+1 when the kept part is odd) carries
// into bit 16 exactly when the dropped part is above half (or half and the kept part odd). A carry
// out of the mantissa bumps the exponent, and out of the largest finite value gives infinity.
constexpr uint16_t float_to_bfloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFu;  // NaN, as PyTorch's CPU cast
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// Element types for tensors of dtype Float16 and BFloat16. They convert implicitly to and from
// float (rounding once, as above), so `T(f(float(x)))` reads the same for every floating T; they
// have no operators of their own, so any arithmetic on them is visibly float arithmetic.
struct Half {
  uint16_t bits;
  Half() = default;
  constexpr Half(float f) : bits(float_to_half(f)) {}
  constexpr operator float() const { return half_to_float(bits); }
  static constexpr Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  constexpr BFloat16(float f) : bits(float_to_bfloat16(f)) {}
  constexpr operator float() const { return bfloat16_to_float(bits); }
  static constexpr BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace mt
