// NPY: what we write is byte-for-byte what numpy.save writes; what numpy can write in the dtypes we
// support reads back (versions 1.0 to 3.0, Fortran order, widened integers); and every broken or
// unsupported file is one error that says what is wrong.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "data/detail/file_io.h"
#include "data/npy.h"
#include "test_util.h"

using namespace mt;
using namespace mt::data;
using mt::test::u8;

namespace {

// An NPY file with this header text (used as is, no padding) and data, in format version `major`.0.
std::string npy(const std::string& header, const std::string& data, int major = 1) {
  std::string s = "\x93NUMPY";
  s += static_cast<char>(major);
  s += '\0';
  const size_t length_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) s += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return s + header + data;
}

template <typename T>
std::string raw_bytes(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(values), s.size());
  return s;
}

Tensor decode(const std::string& s) { return decode_npy(u8(s), s.size(), "a.npy"); }

}  // namespace

TEST_CASE("write_npy writes exactly what numpy.save writes") {
  // numpy.save(f, np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)): a 128-byte prefix + header.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header += std::string(128 - 10 - header.size() - 1, ' ') + "\n";
  const std::string expected = npy(header, raw_bytes<float>({1, 2, 3, 4, 5, 6}));
  CHECK(encode_npy(from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})) == expected);
  CHECK(encode_npy(from_vector(std::vector<int64_t>{7}, {1})).substr(10, 60) ==
        "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }   ");
  CHECK(encode_npy(scalar_tensor(1.5, {.dtype = kFloat64})).find("'shape': (), }") != std::string::npos);
}

TEST_CASE("NPY round trips: dtypes, 0-d, empty, non-contiguous sources") {
  mt::test::TempDir dir;
  const Tensor cases[] = {
      from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 5.0f, 6.0f}, {3, 2}),
      from_vector(std::vector<double>{1e-300, 2.5}, {2}),
      from_vector(std::vector<int64_t>{-1, 1LL << 40, 3}, {3, 1, 1}),
      scalar_tensor(4.0),
      zeros({0, 7}),
      from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).t(),  // a transposed view
  };
  for (const Tensor& t : cases) {
    CAPTURE(t.sizes());
    const std::string path = dir.file("t.npy");
    write_npy(path, t);
    const Tensor back = read_npy(path);
    CHECK(back.sizes() == t.sizes());
    CHECK(back.dtype() == t.dtype());
    CHECK(back.is_contiguous());
    CHECK(back.to_vector<double>() == t.to_vector<double>());
    // The header is padded so that the data starts at a multiple of 64 bytes.
    CHECK((encode_npy(back).size() - static_cast<size_t>(back.numel()) * element_size(back.dtype())) % 64 == 0);
  }
}

// Note [Output files] through write_npy (mini_train predict --output): a symlink is written
// through, a FIFO or a folder refused with one line before anything is written.
TEST_CASE("write_npy writes through a symlink and refuses a FIFO or a folder") {
  mt::test::TempDir dir;
  const Tensor y = from_vector(std::vector<int64_t>{3, 1, 4}, {3});
  std::filesystem::create_symlink("real.npy", dir.file("link.npy"));
  write_npy(dir.file("link.npy"), y);
  CHECK(std::filesystem::is_symlink(dir.file("link.npy")));
  CHECK(read_npy(dir.file("real.npy")).to_vector<int64_t>() == std::vector<int64_t>{3, 1, 4});

  REQUIRE(::mkfifo(dir.file("pipe.npy").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(write_npy(dir.file("pipe.npy"), y),
                       doctest::Contains("pipe.npy: not a regular file (a FIFO); give a file path"), Error);
  std::filesystem::create_directory(dir.file("out.npy"));
  CHECK_THROWS_WITH_AS(write_npy(dir.file("out.npy"), y),
                       doctest::Contains("out.npy: not a regular file (a directory)"), Error);
}

TEST_CASE("NPY files numpy writes in other forms read back") {
  // Versions 2.0 and 3.0 differ from 1.0 only in a 4-byte header length.
  const std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n";
  for (int major : {1, 2, 3})
    CHECK(decode(npy(header, raw_bytes<double>({0.5, -1}), major)).to_vector<double>() == std::vector<double>{0.5, -1});

  // uint8 and int32 widen to int64 (minitrain has no narrow integer dtypes).
  const Tensor u1 = decode(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x7f\xff", 3)));
  CHECK(u1.dtype() == kInt64);
  CHECK(u1.to_vector<int64_t>() == std::vector<int64_t>{0, 127, 255});
  const Tensor i4 = decode(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", raw_bytes<int32_t>({-5, 1 << 30})));
  CHECK(i4.to_vector<int64_t>() == std::vector<int64_t>{-5, 1 << 30});

  // Fortran order: the data of [[1, 2, 3], [4, 5, 6]] column by column; we return C order.
  const Tensor f = decode(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                              raw_bytes<float>({1, 4, 2, 5, 3, 6})));
  CHECK(f.sizes() == Shape{2, 3});
  CHECK(f.is_contiguous());
  CHECK(f.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});

  // Key order, quotes, spacing and Python 2's long suffix are numpy's business, not ours.
  const Tensor odd = decode(npy("{ \"shape\" : (1L, 2L) , \"descr\":\"<i8\",'fortran_order':False}  \n",
                                raw_bytes<int64_t>({8, 9})));
  CHECK(odd.sizes() == Shape{1, 2});
  CHECK(odd.to_vector<int64_t>() == std::vector<int64_t>{8, 9});
}

TEST_CASE("malformed and unsupported NPY files are rejected, each with a telling message") {
  const std::string ok_data = raw_bytes<float>({1, 2});
  auto rejects = [](const std::string& file, const std::string& message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(decode(file), doctest::Contains(message.c_str()), Error);
  };
  auto header = [](const std::string& descr, const std::string& order, const std::string& shape) {
    return "{'descr': " + descr + ", 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  };
  rejects("PK\x03\x04", "not an NPY file");
  rejects("\x93NUMPY", "no version after the magic");
  rejects(npy("{}", "", 4), "NPY format version 4.0 is not supported");
  rejects(std::string("\x93NUMPY\x01\x00\x10", 9), "it ends inside the header length");
  rejects(std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17), "the header is said to be 255 bytes, but only 7 follow");

  rejects(npy(header("'|O'", "False", "(2,)"), ok_data), "object arrays");
  rejects(npy(header("'>f4'", "False", "(2,)"), ok_data), "big-endian data");
  rejects(npy(header("'<c16'", "False", "(2,)"), ok_data), "NPY dtype '<c16' is not supported");
  rejects(npy(header("[('x', '<f4')]", "False", "(2,)"), ok_data), "structured NPY dtypes");
  rejects(npy("{'descr': '<f4', 'shape': (2,), }", ok_data), "must have the keys descr, fortran_order and shape");
  rejects(npy(header("'<f4'", "False", "(2,)") + "{", ok_data), "text after the closing '}'");
  rejects(npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", ok_data), "appears twice");
  rejects(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", ok_data), "unknown key 'x'");
  rejects(npy(header("'<f4'", "false", "(2,)"), ok_data), "expected True or False");
  rejects(npy("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", ok_data), "expected ',' or '}'");
  rejects(npy("{'descr': '<f4", ok_data), "unterminated string");
  rejects(npy(header("'<\\x66'", "False", "(2,)"), ok_data), "escape sequences");
  rejects(npy(header("'<f4'", "False", "(2)"), ok_data), "a one-dim shape is written (n,)");
  rejects(npy(header("'<f4'", "False", "[2]"), ok_data), "expected '(' opening the shape tuple");
  rejects(npy(header("'<f4'", "False", "(-2,)"), ok_data), "expected a non-negative integer");
  rejects(npy(header("'<f4'", "False", "(1 2)"), ok_data), "expected ',' or ')'");
  rejects(npy(header("'<f4'", "False", "(99999999999999999999,)"), ok_data), "dimension too large");
  rejects(npy(header("'<f4'", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), ok_data), "more than 8 dims");
  rejects(npy(header("'<f4'", "False", "(4294967296, 4294967296)"), ok_data), "more elements than a tensor can index");
  rejects(npy(header("'<f4'", "False", "(3,)"), ok_data), "needs 3 elements of 4 bytes, but only 8 bytes");
  rejects(npy(header("'<f4'", "False", "(65536, 65536, 65536)"), ok_data), "truncated NPY file");
  rejects(npy(header("'<f4'", "False", "(1,)"), ok_data), "4 bytes of trailing data");
  rejects(npy(std::string("{'descr': '<f4'\x01", 16), ok_data), "'{'descr': '<f4'\\x01'");  // quoted safely

  CHECK_THROWS_WITH_AS(read_npy("/nonexistent/x.npy"), doctest::Contains("/nonexistent/x.npy: no such file"), Error);
}
