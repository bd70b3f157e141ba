// safetensors_format.h: what the writer (safetensors.cpp) and the reader (safetensors_read.cpp)
// of nn/safetensors.h share: the reserved metadata key, the dtype names minitrain writes, and the
// spelling of the tensor checksums (Note [Tensor checksums] in safetensors.cpp). Internal to those
// two files; nothing else includes it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tensor/tensor.h"

namespace mt::detail {

// Tensor bytes go to disk exactly as they sit in memory, and the format says little-endian.
// A big-endian port would have to byte-swap every element on the way in and out.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

constexpr const char* kMetadataKey = "__metadata__";
// The metadata key of a tensor's checksum is this prefix and its name (Note [Tensor checksums]).
constexpr const char* kChecksumPrefix = "mt.crc32c.";
constexpr size_t kChecksumDigits = 8;  // lowercase hex, zero-padded: every checksum has one width

struct DTypeName { DType dtype; const char* name; };
constexpr DTypeName kDTypeNames[] = {{kFloat32, "F32"}, {kFloat64, "F64"}, {kInt64, "I64"},
                                     {kBFloat16, "BF16"}, {kFloat16, "F16"}};

// A checksum as the metadata holds it: "e3069283".
inline std::string checksum_hex(uint32_t crc) {
  char hex[kChecksumDigits + 1];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

}  // namespace mt::detail
