// npy.cpp: the NPY reader (check the prefix, parse the header dict strictly, check the data length,
// copy and widen the elements) and the writer. The format is described in npy.h.
#include "data/npy.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "data/detail/file_io.h"
#include "tensor/output_file.h"
#include "tensor/raw_ops.h"

namespace mt::data {
namespace {

// Elements go between file and tensor with memcpy, and NPY's '<' means little-endian.
static_assert(std::endian::native == std::endian::little, "NPY I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

// The descrs we read, the tensor dtype each becomes, and its size in the file.
struct NpyDType {
  std::string_view descr;
  DType dtype;
  size_t itemsize;
};
constexpr NpyDType kNpyDTypes[] = {
    {"<f4", kFloat32, 4}, {"<f8", kFloat64, 8}, {"<i8", kInt64, 8}, {"<i4", kInt64, 4}, {"|u1", kInt64, 1}};

struct Header {
  NpyDType dtype;
  bool fortran_order = false;
  Shape shape;
};

NpyDType lookup_dtype(const std::string& descr, const std::string& origin) {
  for (const NpyDType& d : kNpyDTypes)
    if (d.descr == descr) return d;
  if (descr.size() >= 2 && descr[1] == 'O')
    MT_FAIL(origin, ": object arrays (descr ", detail::printable(descr), ") are not supported: they hold "
            "pickled Python objects, and unpickling an untrusted file can run arbitrary code; save a numeric array");
  if (!descr.empty() && descr[0] == '>')
    MT_FAIL(origin, ": big-endian data (descr ", detail::printable(descr), ") is not supported; convert it "
            "with numpy: a.astype(a.dtype.newbyteorder('<'))");
  MT_FAIL(origin, ": NPY dtype ", detail::printable(descr),
          " is not supported; minitrain reads <f4, <f8, <i8, <i4 and |u1");
}

// A strict parser for the one Python literal numpy writes as a header:
//   {'descr': <str>, 'fortran_order': <True|False>, 'shape': <tuple of non-negative ints>}
// in any key order, each key exactly once, with optional trailing commas and whitespace.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& origin) : s_(text), origin_(origin) {}

  Header parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{', "'{' opening the header dict");
    while (!eat('}')) {
      const std::string key = string();
      expect(':', "':' after a key");
      if (key == "descr") {
        once(have_descr, key);
        skip_ws();
        if (i_ < s_.size() && s_[i_] == '[')
          MT_FAIL(origin_, ": structured NPY dtypes (descr is a list of fields) are not supported");
        h.dtype = lookup_dtype(string(), origin_);
      } else if (key == "fortran_order") {
        once(have_order, key);
        h.fortran_order = boolean();
      } else if (key == "shape") {
        once(have_shape, key);
        h.shape = shape();
      } else {
        fail("unknown key " + detail::printable(key) + " (expected descr, fortran_order, shape)");
      }
      if (!eat(',')) {
        expect('}', "',' or '}' after a value");
        break;
      }
    }
    skip_ws();
    if (i_ != s_.size()) fail("text after the closing '}'");
    if (!have_descr || !have_order || !have_shape) fail("the dict must have the keys descr, fortran_order and shape");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    MT_FAIL(origin_, ": malformed NPY header at character ", i_, ": ", what, "; the header is ", detail::printable(s_));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    if (!eat(c)) fail(std::string("expected ") + what);
  }
  void once(bool& seen, const std::string& key) {
    if (seen) fail("key '" + key + "' appears twice");
    seen = true;
  }
  // 'text' or "text", without escapes (numpy's descrs and keys have none).
  std::string string() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string");
    const char quote = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\') fail("escape sequences in strings are not supported");
      ++i_;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    skip_ws();
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return value;
      }
    }
    fail("expected True or False");
  }
  // A non-negative decimal integer; Python 2's numpy wrote a trailing L on longs.
  int64_t integer() {
    skip_ws();
    const size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const int digit = s_[i_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("dimension too large");
      v = v * 10 + digit;
    }
    if (i_ == start) fail("expected a non-negative integer in the shape");
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;
    return v;
  }
  // (), (n,), (n, m), ... : Python's tuple syntax, so one dim needs its comma.
  Shape shape() {
    expect('(', "'(' opening the shape tuple");
    Shape dims;
    bool comma = false;
    while (!eat(')')) {
      if (dims.size() > 0 && !comma) fail("expected ',' or ')' in the shape");
      MT_CHECK(dims.size() < kMaxDims, origin_, ": the NPY array has more than ", kMaxDims,
               " dims; minitrain tensors have at most ", kMaxDims);
      dims.push_back(integer());
      comma = eat(',');
    }
    if (dims.size() == 1 && !comma) fail("a one-dim shape is written (n,), not (n)");
    return dims;
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string& origin_;
};

uint32_t little_endian(const uint8_t* p, size_t bytes) {
  uint32_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}

// Copies `numel` elements of `dtype` from unaligned file bytes into t, widening <i4 and |u1 to int64.
void copy_elements(const Tensor& t, const uint8_t* src, const NpyDType& dtype, int64_t numel) {
  if (dtype.itemsize == element_size(dtype.dtype)) {
    std::memcpy(t.raw_data(), src, static_cast<size_t>(numel) * dtype.itemsize);
    return;
  }
  int64_t* out = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < numel; ++i) {
    if (dtype.itemsize == 4) {
      int32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    } else {
      out[i] = src[i];
    }
  }
}

std::string shape_tuple(const Shape& shape) {
  std::string s = "(";
  for (int d = 0; d < shape.size(); ++d) s += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

Tensor decode_npy(const uint8_t* data, size_t size, const std::string& origin) {
  MT_CHECK(size >= kMagicBytes && std::memcmp(data, kMagic, kMagicBytes) == 0, origin,
           ": not an NPY file (it does not start with \\x93NUMPY)");
  MT_CHECK(size >= kMagicBytes + 2, origin, ": truncated NPY file: no version after the magic");
  const int major = data[6], minor = data[7];
  MT_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, origin, ": NPY format version ", major, ".",
           minor, " is not supported (1.0, 2.0 and 3.0 are)");
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicBytes + 2 + length_bytes;
  MT_CHECK(size >= prefix, origin, ": truncated NPY file: it ends inside the header length");
  const size_t header_len = little_endian(data + kMagicBytes + 2, length_bytes);
  MT_CHECK(header_len <= size - prefix, origin, ": truncated NPY file: the header is said to be ", header_len,
           " bytes, but only ", size - prefix, " follow");

  const std::string_view text(reinterpret_cast<const char*>(data + prefix), header_len);
  const Header h = HeaderParser(text, origin).parse();
  const int64_t numel = detail::checked_numel(h.shape, origin);

  // Check the data length before allocating anything of the claimed size (Note [Hostile files]).
  const size_t offset = prefix + header_len, have = size - offset;
  MT_CHECK(static_cast<uint64_t>(numel) <= have / h.dtype.itemsize, origin, ": truncated NPY file: shape ",
           h.shape, " of ", h.dtype.descr, " needs ", numel, " elements of ", h.dtype.itemsize,
           " bytes, but only ", have, " bytes of data follow the header");
  const size_t need = static_cast<size_t>(numel) * h.dtype.itemsize;
  MT_CHECK(have == need, origin, ": ", have - need, " bytes of trailing data after the ", need,
           " bytes that shape ", h.shape, " of ", h.dtype.descr, " needs");

  if (!h.fortran_order) {
    Tensor t = empty(h.shape, {.dtype = h.dtype.dtype});
    copy_elements(t, data + offset, h.dtype, numel);
    return t;
  }
  // Column-major data of shape (a, b, c) is row-major data of shape (c, b, a): read it as that,
  // then reverse the dims and copy into C order.
  Shape reversed(h.shape.begin(), h.shape.end());
  std::reverse(reversed.begin(), reversed.end());
  Tensor t = empty(reversed, {.dtype = h.dtype.dtype});
  copy_elements(t, data + offset, h.dtype, numel);
  Shape order;
  for (int d = h.shape.size() - 1; d >= 0; --d) order.push_back(d);
  return raw::clone(raw::permute(t, order));
}

Tensor read_npy(const std::string& path) {
  const std::string bytes = read_file(path);
  return decode_npy(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

std::string encode_npy(const Tensor& t) {
  MT_CHECK(t.defined(), "write_npy: the tensor is undefined");
  const char* descr = nullptr;
  switch (t.dtype()) {
    case kFloat32: descr = "<f4"; break;
    case kFloat64: descr = "<f8"; break;
    case kInt64: descr = "<i8"; break;
    default: MT_FAIL("write_npy: dtype ", t.dtype(), " is not supported (float32, float64 and int64 are)");
  }
  const Tensor c = raw::contiguous(raw::to_device(t, kCPU));

  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape_tuple(c.sizes()) + ", }";
  // Like numpy: pad with spaces and end with '\n' so that the data starts at a multiple of 64 bytes
  // (aligned for memory-mapped readers). Version 2.0 only when the header outgrows 1.0's 16-bit length.
  const int major = header.size() + 1 + 64 < 65536 ? 1 : 2;
  const size_t prefix = kMagicBytes + 2 + (major == 1 ? 2 : 4);
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';

  const size_t data_bytes = static_cast<size_t>(c.numel()) * element_size(c.dtype());
  std::string out;
  out.reserve(prefix + header.size() + data_bytes);
  out.append(kMagic, kMagicBytes);
  out += static_cast<char>(major);
  out += '\0';
  const size_t length_bytes = prefix - kMagicBytes - 2;
  for (size_t i = 0; i < length_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  out.append(static_cast<const char*>(c.raw_data()), data_bytes);
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  const std::string bytes = encode_npy(t);  // a bad tensor fails before the file is touched
  write_file_atomically(path, bytes, "write_npy");
}

}  // namespace mt::data
