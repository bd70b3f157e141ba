// CRC32C three ways (see crc32c.h): the bitwise definition, slicing-by-8, and SSE4.2's crc32.
// Each works on the CRC register, the running remainder; the public functions invert it on the
// way in and out (the format's initial value and final xor), which is what makes `crc` continue
// an earlier call.
#include "nn/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define MT_CRC32C_X86 1
#endif

namespace mt {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli's 0x1EDC6F41 with its bits reversed

// One byte into the register, bit by bit: the definition every faster form must agree with.
constexpr uint32_t step_byte(uint32_t reg, uint8_t byte) {
  reg ^= byte;
  for (int bit = 0; bit < 8; ++bit) reg = (reg >> 1) ^ (reg & 1 ? kPolynomial : 0);
  return reg;
}

// kTables[0][b]: byte b through the register from 0. kTables[k][b]: the same followed by k zero
// bytes. Eight bytes then cost eight lookups: each byte is looked up in the table of how many
// bytes still follow it in the group of eight, and the results xor together (a CRC is linear).
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) t[0][b] = step_byte(0, static_cast<uint8_t>(b));
  for (int k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}
constexpr auto kTables = make_tables();

uint32_t sliced(const uint8_t* p, size_t n, uint32_t reg) {
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;  // little-endian loads (safetensors.cpp asserts a little-endian host)
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= reg;
    reg = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
          kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
          kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) reg = (reg >> 8) ^ kTables[0][(reg ^ *p) & 0xFF];
  return reg;
}

#ifdef MT_CRC32C_X86
// SSE4.2's crc32 instruction is exactly this CRC, 8 bytes per instruction. Compiled for SSE4.2
// here only, and called only when the CPU says it has it.
__attribute__((target("sse4.2"))) uint32_t hardware(const uint8_t* p, size_t n, uint32_t reg) {
  uint64_t reg64 = reg;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    reg64 = _mm_crc32_u64(reg64, v);
  }
  reg = static_cast<uint32_t>(reg64);
  for (; n > 0; ++p, --n) reg = _mm_crc32_u8(reg, *p);
  return reg;
}
#endif

}  // namespace

namespace detail {

uint32_t crc32c_bitwise(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t reg = ~crc;
  for (size_t i = 0; i < n; ++i) reg = step_byte(reg, p[i]);
  return ~reg;
}

uint32_t crc32c_sliced(const void* data, size_t n, uint32_t crc) {
  return ~sliced(static_cast<const uint8_t*>(data), n, ~crc);
}

bool crc32c_hardware() {
#ifdef MT_CRC32C_X86
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
#ifdef MT_CRC32C_X86
  if (detail::crc32c_hardware()) return ~hardware(p, n, ~crc);
#endif
  return ~sliced(p, n, ~crc);
}

}  // namespace mt
