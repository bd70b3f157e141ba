// safetensors: reads and writes named tensors in Hugging Face's safetensors format, the file format
// of state_dict() checkpoints. A file is
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  UTF-8 JSON: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8 bytes
//   [rest]     the data section: each tensor's bytes, little-endian, row-major, at
//              [begin, end) relative to the start of the section
//
// so Python's safetensors, numpy (json + frombuffer) and PyTorch read what we write, and we read theirs.
//
// What it does: F32, F64, I64, BF16 and F16 tensors (minitrain's CPU dtypes), each read and written
// as itself, of any shape, including 0-dim and empty ones; the
// string metadata map; atomic saves that write through symlinks and refuse devices
// (Note [Output files] in tensor/output_file.cpp); strict, bounds-checked loading
// (Note [Hostile safetensors files] in safetensors_read.cpp); a CRC32C of each tensor's bytes, written
// into the metadata as "mt.crc32c.<name>" and checked on every load of a file that has them
// (Note [Tensor checksums]).
// What it does not do: other dtypes (I32, U8, ... are rejected with a clear error, not converted),
// lazy or memory-mapped loading (a file is read whole, then copied into fresh tensors),
// sharded checkpoints, or mapping names onto a Module (that is Module::load_state_dict's job).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace mt {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What a file holds: its tensors, always fresh contiguous CPU tensors that share nothing with the
// bytes they came from, in the order of their data in the file (which for files we wrote is the
// order they were saved in; see Note [Data order] in safetensors.cpp), and its metadata.
struct SafetensorsFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` (any device, any strides; copied to contiguous CPU bytes on the way) and
// `metadata` to `path`, atomically: either the whole new file is there afterwards, or the old one
// is untouched. A symlink's file is written and the link kept; a device, FIFO, socket or folder is
// refused before anything is written (Note [Output files]). Names must be unique and must not be
// "__metadata__". Throws mt::Error naming `path` (and its temporary) and the OS error on failure.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a whole file and decodes it. Throws mt::Error naming the path on any problem, and naming
// the tensor when its bytes fail their checksum (a damaged file).
SafetensorsFile load_safetensors(const std::string& path);

// The bytes save_safetensors writes, in memory (for tests, and for sending a state over a socket).
std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Parses and checks `size` bytes of a safetensors file. `origin` names where the bytes came from
// (a path, "<memory>") and starts every error message. The input is treated as hostile: every
// problem is an mt::Error, never a read out of bounds or a huge allocation. The checksum keys are
// checked and taken out of the metadata returned (Note [Tensor checksums]).
SafetensorsFile decode_safetensors(const uint8_t* data, size_t size, const std::string& origin);

}  // namespace mt
