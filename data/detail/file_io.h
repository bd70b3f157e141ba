// file_io: the byte-level plumbing the readers (IDX, NPY, CSV) share: whole-file reads and writes,
// gzip inflation with a size limit, and the checks that keep a hostile header from making us
// allocate or index what the bytes do not back up (Note [Hostile files] in file_io.cpp).
//
// Not here: memory mapping or streaming (files are read whole), compression (we only inflate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tensor/shape.h"

namespace mt::data {

// The whole contents of a regular file. Throws naming the path and the OS error.
std::string read_file(const std::string& path);
// Replaces `path` with `bytes`, atomically, through a symlink to its file; a device, FIFO, socket or
// folder is refused (Note [Output files] in tensor/output_file.cpp). Throws naming the path and
// the OS error.
void write_file(const std::string& path, std::string_view bytes);

// True when the bytes start with the gzip magic 1f 8b.
bool is_gzip(const uint8_t* data, size_t size);

// Inflates a gzip file held in memory (one or more members, as gzip(1) writes them) and returns its
// first min(limit, total) bytes. A result shorter than `limit` is the whole content, with every
// member's CRC and length checked. Corrupt, truncated or trailing data is an mt::Error starting
// with `origin`. Memory grows with the bytes actually inflated, never with `limit` alone.
std::string gunzip(const uint8_t* data, size_t size, size_t limit, const std::string& origin);

namespace detail {

// Number of elements of a tensor with these sizes, read from an untrusted header. Throws (starting
// with `origin`) when the product of the sizes, zeros counted as ones, exceeds int64: such a shape
// would overflow strides even when it holds no element.
int64_t checked_numel(const Shape& sizes, const std::string& origin);

// For error messages quoting untrusted text: at most 40 characters, control bytes escaped, quoted.
std::string printable(std::string_view s);

}  // namespace detail
}  // namespace mt::data
