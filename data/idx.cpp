// idx.cpp: parse an IDX header, check it against the bytes present (Note [Hostile files] in
// file_io.cpp), convert the unsigned bytes to the requested dtype. The format is in idx.h.
#include "data/idx.h"

#include <cstdio>
#include <string_view>

#include "data/detail/file_io.h"

namespace mt::data {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;
// Largest header we ever need to look at: magic + kMaxDims dims. A file claiming more dims is
// rejected from its magic alone.
constexpr size_t kMaxHeaderBytes = 4 + 4 * kMaxDims;

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct Header {
  Shape shape;
  size_t header_bytes;  // magic + dims
  size_t data_bytes;    // one byte per element
};

// Reads the header from the first `size` bytes (at least kMaxHeaderBytes of the file when it is
// that long). Checks the magic and the dims, not yet the length of the data.
Header parse_header(const uint8_t* p, size_t size, const std::string& origin) {
  MT_CHECK(size >= 4, origin, ": not an IDX file: ", size, " bytes, shorter than the 4-byte magic");
  MT_CHECK(p[0] == 0 && p[1] == 0, origin, ": not an IDX file: the magic number must start with two zero "
           "bytes, got ", detail::printable(std::string_view(reinterpret_cast<const char*>(p), 2)));
  const uint8_t type = p[2], ndim = p[3];
  if (type != kUnsignedByte) {
    const char* name = idx_type_name(type);
    char code[8];
    std::snprintf(code, sizeof code, "0x%02X", type);
    MT_FAIL(origin, ": IDX element type ", name != nullptr ? name : "unknown", " (", code,
            ") is not supported; minitrain reads unsigned-byte IDX files (type 0x08), like MNIST's");
  }
  MT_CHECK(ndim >= 1 && ndim <= kMaxDims, origin, ": IDX file with ", int{ndim},
           " dims; minitrain reads 1 to ", kMaxDims);
  Header h;
  h.header_bytes = 4 + 4 * size_t{ndim};
  MT_CHECK(size >= h.header_bytes, origin, ": truncated IDX header: ", int{ndim}, " dims need ",
           h.header_bytes, " header bytes, the file has ", size);
  for (int d = 0; d < ndim; ++d) h.shape.push_back(big_endian_u32(p + 4 + 4 * d));
  h.data_bytes = static_cast<size_t>(detail::checked_numel(h.shape, origin));
  return h;
}

// The data must be exactly what the header promises: a short file is truncated, a long one is not
// the file it claims to be (or two files glued together). `whole`: `size` is the whole file, not
// just the part of an inflated stream we looked at, so the excess can be counted.
void check_length(const Header& h, size_t size, const std::string& origin, bool whole) {
  const size_t have = size - h.header_bytes;
  MT_CHECK(have >= h.data_bytes, origin, ": truncated IDX file: shape ", h.shape, " needs ", h.data_bytes,
           " bytes of data, the file has ", have);
  MT_CHECK(have == h.data_bytes, origin, ": ", whole ? std::to_string(have - h.data_bytes) + " bytes of " : "",
           "trailing data after the ", h.data_bytes, " bytes that shape ", h.shape, " needs");
}

Tensor convert(const uint8_t* bytes, const Shape& shape, IdxOptions opts) {
  Tensor out = empty(shape, {.dtype = opts.dtype});
  const int64_t n = out.numel();
  MT_DISPATCH_ALL(opts.dtype, "read_idx", [&]<typename T>() {
    T* y = out.data_ptr<T>();
    if (opts.normalize) {
      // A division, not a multiplication by 1/255: correctly rounded, like torchvision's ToTensor.
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(bytes[i]) / T(255);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(bytes[i]);
    }
  });
  return out;
}

}  // namespace

Tensor decode_idx(const uint8_t* data, size_t size, const std::string& origin, IdxOptions opts) {
  MT_CHECK(!opts.normalize || is_floating(opts.dtype), origin,
           ": IdxOptions.normalize needs a floating dtype, got ", opts.dtype);
  if (!is_gzip(data, size)) {
    const Header h = parse_header(data, size, origin);
    check_length(h, size, origin, /*whole=*/true);
    return convert(data + h.header_bytes, h.shape, opts);
  }
  // Inflate just the header first, then exactly as much as it promises plus one byte (to notice
  // trailing data): a tiny gzip file with a huge claimed shape fails when its data runs out.
  const std::string head = gunzip(data, size, kMaxHeaderBytes, origin);
  const Header h = parse_header(reinterpret_cast<const uint8_t*>(head.data()), head.size(), origin);
  const std::string all = gunzip(data, size, h.header_bytes + h.data_bytes + 1, origin + " (inflated)");
  check_length(h, all.size(), origin + " (inflated)", /*whole=*/false);
  return convert(reinterpret_cast<const uint8_t*>(all.data()) + h.header_bytes, h.shape, opts);
}

Tensor read_idx(const std::string& path, IdxOptions opts) {
  const std::string bytes = read_file(path);
  return decode_idx(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, opts);
}

}  // namespace mt::data
