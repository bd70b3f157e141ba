// file_io.cpp: whole-file I/O, gzip inflation through zlib's inflate (from memory, so that the
// fuzzers exercise it without files), and the size checks every reader applies to its header.
//
// Note [Hostile files]: a reader must turn any input into either a tensor or one mt::Error. So it
//   - checks every length and offset in a header against the bytes that are actually there before
//     reading at it,
//   - multiplies untrusted dimensions with overflow checks (checked_numel),
//   - allocates a tensor only once the data it will hold is known to be present: the element count
//     is then bounded by the file's size (or, for gzip, by the bytes inflate really produced), so a
//     100-byte file claiming 2^40 elements is an error, not an out-of-memory crash,
//   - quotes untrusted text in its messages only through printable().
// fuzz/ runs libFuzzer over the NPY and IDX decoders to hold them to this.
#include "data/detail/file_io.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "tensor/check.h"
#include "tensor/output_file.h"

namespace mt::data {
namespace {

std::string os_error() { return std::strerror(errno); }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

std::string read_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  MT_CHECK(std::filesystem::exists(status), path, ": no such file");
  // Not a FIFO or a device: reading /dev/zero "whole" would never end.
  MT_CHECK(std::filesystem::is_regular_file(status), path, ": not a regular file");
  File f(std::fopen(path.c_str(), "rb"));
  MT_CHECK(f != nullptr, path, ": cannot open (", os_error(), ")");
  MT_CHECK(std::fseek(f.get(), 0, SEEK_END) == 0, path, ": cannot seek (", os_error(), ")");
  const long size = std::ftell(f.get());
  MT_CHECK(size >= 0, path, ": cannot tell its size (", os_error(), ")");
  std::rewind(f.get());
  std::string bytes(static_cast<size_t>(size), '\0');
  const size_t got = std::fread(bytes.data(), 1, bytes.size(), f.get());
  MT_CHECK(got == bytes.size(), path, ": read ", got, " of ", bytes.size(), " bytes (",
           std::ferror(f.get()) ? os_error() : std::string("file shrank while reading"), ")");
  return bytes;
}

void write_file(const std::string& path, std::string_view bytes) { write_file_atomically(path, bytes, "write_file"); }

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::string gunzip(const uint8_t* data, size_t size, size_t limit, const std::string& origin) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (not raw deflate, not zlib's own wrapper).
  MT_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, origin, ": cannot start zlib's inflate");
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};

  const uint8_t* const input_end = data + size;
  zs.next_in = const_cast<Bytef*>(data);
  std::string out;
  size_t produced = 0;
  while (produced < limit) {
    // Grow geometrically from 64 KiB: memory follows the inflated bytes, not the caller's limit.
    if (produced == out.size()) out.resize(std::min(limit, std::max<size_t>(out.size() * 2, 1 << 16)));
    // zlib counts in 32-bit uInt: feed and drain at most 4 GiB per call.
    const size_t left_in = static_cast<size_t>(input_end - zs.next_in);
    zs.avail_in = static_cast<uInt>(std::min<size_t>(left_in, UINT_MAX));
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, UINT_MAX));
    const uInt room = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_END) {
      const size_t rest = static_cast<size_t>(input_end - zs.next_in);
      if (rest == 0) break;
      // gzip(1) concatenates members (gzip a b > ab.gz); anything else after a member is an error.
      MT_CHECK(is_gzip(zs.next_in, rest), origin, ": ", rest, " bytes of trailing data after the gzip stream");
      MT_CHECK(inflateReset(&zs) == Z_OK, origin, ": cannot restart zlib's inflate");
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.next_in == input_end)
      MT_FAIL(origin, ": truncated gzip stream (it ends after ", produced, " bytes of output)");
    MT_CHECK(rc == Z_OK, origin, ": corrupt gzip data (zlib: ", zs.msg != nullptr ? zs.msg : zError(rc), ")");
  }
  out.resize(produced);
  return out;
}

namespace detail {

int64_t checked_numel(const Shape& sizes, const std::string& origin) {
  int64_t numel = 1, span = 1;  // span: the product with zeros counted as ones
  for (int64_t d : sizes) {
    MT_CHECK(d >= 0, origin, ": negative dimension ", d, " in shape ", sizes);
    MT_CHECK(d <= 1 || span <= std::numeric_limits<int64_t>::max() / d, origin, ": shape ", sizes,
             " has more elements than a tensor can index");
    span *= std::max<int64_t>(d, 1);
    numel *= d;
  }
  return numel;
}

std::string printable(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (unsigned char c : s.substr(0, kMax)) {
    if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += s.size() > kMax ? "'..." : "'";
  return out;
}

}  // namespace detail
}  // namespace mt::data
