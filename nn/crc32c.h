// CRC32C (Castagnoli): the checksum safetensors files from minitrain carry over each tensor's bytes
// (Note [Tensor checksums] in safetensors.cpp). The same CRC as iSCSI, ext4 metadata and
// Google's crc32c library: polynomial 0x1EDC6F41, bit-reflected (0x82F63B78), initial value and
// final xor 0xFFFFFFFF, so crc32c("123456789") == 0xE3069283.
//
// Three ways to compute it, which tests/nn/test_crc32c.cpp holds equal:
//   detail::crc32c_bitwise   the definition, one bit at a time: obviously correct, ~100x slower;
//   detail::crc32c_sliced    slicing-by-8 tables, 8 bytes per step: any CPU;
//   crc32c                   x86's SSE4.2 crc32 instruction where the CPU has it (asked at run
//                            time, so a -march=native-less build still gets it), sliced elsewhere.
// What it is not: a cryptographic hash. It catches damage (flipped bits, torn or zeroed blocks),
// not a file edited on purpose.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mt {

// The CRC32C of `n` bytes at `data`. `crc` continues an earlier call: crc32c(b, nb, crc32c(a, na))
// is the CRC of a followed by b; the default 0 starts a new one.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

namespace detail {
uint32_t crc32c_bitwise(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_sliced(const void* data, size_t n, uint32_t crc = 0);
// Whether crc32c() uses the CPU's instruction here (for the tests and the benchmark's label).
bool crc32c_hardware();
}  // namespace detail

}  // namespace mt
