// IDX: the file format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist). A file is
//
//   [4 bytes]       magic: 0x00 0x00, the element type (0x08 = unsigned byte), the number of dims
//                   (MNIST: 0x00000803 for images (N, 28, 28), 0x00000801 for labels (N))
//   [4 bytes each]  the dims, big-endian uint32
//   [rest]          the elements, row-major, one byte each
//
// usually distributed gzip-compressed (*-ubyte.gz). Both forms are read: gzip is recognised by its
// magic bytes, not by the file name.
//
// What it does: unsigned-byte IDX files of 1 to 8 dims, plain or gzip, converted to a minitrain dtype
// (there is no uint8 tensor dtype: int64 keeps labels exact, float32 is what images are trained in).
// What it does not do: the other IDX element types (int8, int16, int32, float32, float64), writing.
// Hostile input (truncated, trailing bytes, absurd dims, wrong magic) is one mt::Error each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace mt::data {

struct IdxOptions {
  DType dtype = kInt64;    // kInt64 keeps the byte values exactly; kFloat32/kFloat64 for pixels
  bool normalize = false;  // divide by 255 so bytes become [0, 1]; needs a floating dtype
};

// The file's elements as a contiguous CPU tensor with the file's shape, e.g. (60000, 28, 28).
// Errors start with the path.
Tensor read_idx(const std::string& path, IdxOptions opts = {});

// The same from `size` bytes in memory (plain or gzip). `origin` (a path, "<memory>") starts every
// error message.
Tensor decode_idx(const uint8_t* data, size_t size, const std::string& origin, IdxOptions opts = {});

}  // namespace mt::data
