// float16 <-> float32 (tensor/half.h) against an independent oracle: every finite half value, sorted,
// and a nearest-value search with ties to even. Plus the CPU cast through Tensor::to.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/half.h"
#include "tensor/tensor.h"

using namespace mt;

namespace {

// The value of a finite half from its fields, computed in double: (-1)^s · 2^(e-15) · (1 + m/1024),
// or 2^-14 · m/1024 for subnormals.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double v = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

// Round-to-nearest-even by search over all non-negative finite halves (0x0000..0x7BFF, increasing).
uint16_t oracle(float f) {
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;  // halfway between 65504 and the next (65536) rounds up to inf
  uint16_t lo = 0, hi = 0x7BFF;
  while (lo < hi) {  // the largest half <= a
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (half_value(mid) <= a) lo = mid; else hi = static_cast<uint16_t>(mid - 1);
  }
  if (lo == 0x7BFF) return sign | lo;  // between 65504 and 65520: rounds down
  const double below = half_value(lo), above = half_value(static_cast<uint16_t>(lo + 1));
  const double d1 = a - below, d2 = above - a;
  const uint16_t r = d1 < d2 ? lo : d2 < d1 ? static_cast<uint16_t>(lo + 1) : (lo & 1 ? lo + 1 : lo);
  return sign | r;
}

}  // namespace

TEST_CASE("half: every half value converts to float and back unchanged") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    if (nan) {
      CHECK(std::isnan(f));
      continue;
    }
    if ((h & 0x7C00) != 0x7C00) REQUIRE(static_cast<double>(f) == half_value(static_cast<uint16_t>(h)));
    REQUIRE(float_to_half(f) == h);
  }
}

TEST_CASE("half: float to half rounds to nearest even, like the hardware") {
  CHECK(float_to_half(1.0f) == 0x3C00);
  CHECK(float_to_half(65504.0f) == 0x7BFF);
  CHECK(float_to_half(65519.99f) == 0x7BFF);
  CHECK(float_to_half(65520.0f) == 0x7C00);  // the tie rounds to even: infinity
  CHECK(float_to_half(-1e9f) == 0xFC00);
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // halfway to it: ties to even (zero)
  CHECK(float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // halfway between 1 and 1+2^-10: even
  CHECK(float_to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);  // halfway between odd and even: even
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));

  // Every 4099th float32 bit pattern (about a million, all exponents and signs) against the oracle.
  for (uint64_t bits = 0; bits < 0x100000000ull; bits += 4099) {
    float f;
    const auto b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, sizeof f);
    const uint16_t got = float_to_half(f), want = oracle(f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(half_to_float(got)));
      continue;
    }
    REQUIRE_MESSAGE(got == want, "float bits 0x", std::hex, b, ": got 0x", got, ", want 0x", want);
  }
}

TEST_CASE("half: CPU tensors cast between float32 and float16, strided too") {
  const Tensor x = from_vector(std::vector<float>{0.1f, -2.5f, 70000.f, 3e-8f, 1.0f, 1000.1f}, {2, 3});
  const Tensor h = x.to(DType::Float16);
  CHECK(h.dtype() == DType::Float16);
  const std::vector<float> back = h.to(kFloat32).to_vector<float>();
  const std::vector<float> want{half_to_float(float_to_half(0.1f)), -2.5f, INFINITY, half_to_float(float_to_half(3e-8f)),
                                1.0f, 1000.0f};
  CHECK(back == want);
  const std::vector<float> transposed = h.transpose(0, 1).to(kFloat32).contiguous().to_vector<float>();
  CHECK(transposed == std::vector<float>{want[0], want[3], want[1], want[4], want[2], want[5]});
  CHECK(h.narrow(1, 0, 2).to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, -2, 0, 1});
}
