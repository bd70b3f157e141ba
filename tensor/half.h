// IEEE 754 binary16 ("half", float16) <-> float32 conversion in plain C++, for the one place the CPU
// needs half precision: casting gradients for fp16-compressed communication (DDP's Fp16CompressHook)
// and back. No arithmetic in half: sums happen in float32 and are rounded once.
//
// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. Largest finite 65504; smallest
// normal 2^-14; subnormals down to 2^-24. float -> half rounds to nearest, ties to even, like the
// hardware (F16C's VCVTPS2PH with rounding mode 0, CUDA's __float2half_rn); overflow gives infinity;
// NaN stays NaN (quiet).
#pragma once

#include <bit>
#include <cstdint>

namespace mt {

constexpr float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F)  // infinity or NaN: all exponent bits set in float32 too
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
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
  if (abs >= 0x7F800000u)  // infinity or NaN (NaN keeps a quiet bit so it stays NaN)
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0u));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504: infinity
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

}  // namespace mt
