// NPY: NumPy's file format for one array (numpy.save / numpy.load; numpy.org, "NEP 1"). A file is
//
//   [6 bytes]   magic "\x93NUMPY"
//   [2 bytes]   version major, minor: 1.0, 2.0 or 3.0
//   [2 or 4]    header length, little-endian (2 bytes in 1.0, 4 bytes in 2.0 and 3.0)
//   [header]    a Python dict literal, padded with spaces and ending in '\n', e.g.
//               {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
//   [rest]      the elements, in C (row-major) or Fortran (column-major) order
//
// What it does: reads descr <f4 (float32), <f8 (float64), <i8 (int64), and <i4 and |u1, which are
// widened to int64 because minitrain has no 32- or 8-bit integer tensors; C or Fortran order (the
// latter is transposed into a C-order copy); 0 to 8 dims. Writes float32, float64 and int64 tensors as
// version 1.0 (2.0 only if the header would not fit), C order, readable by numpy.load.
// What it does not do: big-endian data, other dtypes, structured dtypes, .npz archives, memory
// mapping, and object arrays ('|O'): those are pickled Python objects, which need Python to decode,
// and unpickling an untrusted file can run arbitrary code, so they are refused outright.
// The header is parsed strictly, by a small parser for exactly the literal numpy writes, never by
// evaluating it; hostile input is one mt::Error (Note [Hostile files] in file_io.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace mt::data {

// A fresh contiguous CPU tensor with the array's shape. Errors start with the path.
Tensor read_npy(const std::string& path);
// The same from `size` bytes in memory; `origin` (a path, "<memory>") starts every error message.
Tensor decode_npy(const uint8_t* data, size_t size, const std::string& origin);

// Writes `t` (any device, any strides) to `path`, atomically (Note [Output files] in
// tensor/output_file.cpp: a symlink's file is written, a device refused). Throws naming the path.
void write_npy(const std::string& path, const Tensor& t);
// The bytes write_npy writes.
std::string encode_npy(const Tensor& t);

}  // namespace mt::data
