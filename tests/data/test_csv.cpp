// CSV: numeric tables with or without a header row, and errors that point at the file, line and
// column of the first bad field.
#include <doctest/doctest.h>

#include <cmath>

#include "data/csv.h"
#include "data/detail/file_io.h"
#include "test_util.h"

using namespace mt;
using namespace mt::data;

TEST_CASE("a CSV file with a header row reads into names and a (rows, columns) tensor") {
  mt::test::TempDir dir;
  write_file(dir.file("d.csv"), "x0, \"x 1\" ,y\r\n0.5,1e-3,1\r\n\r\n-2, +3.25 ,0\r\n");
  const CsvTable t = read_csv(dir.file("d.csv"));
  CHECK(t.columns == std::vector<std::string>{"x0", "x 1", "y"});
  CHECK(t.values.sizes() == Shape{2, 3});
  CHECK(t.values.dtype() == kFloat32);
  CHECK(t.values.to_vector<float>() == std::vector<float>{0.5f, 1e-3f, 1, -2, 3.25f, 0});
}

TEST_CASE("CSV header detection, declared headers and dtypes") {
  // All numbers: no header in Auto mode.
  CsvTable t = decode_csv("1,2\n3,4", "m.csv");
  CHECK(t.columns.empty());
  CHECK(t.values.sizes() == Shape{2, 2});
  // A numeric first row declared as a header.
  t = decode_csv("1,2\n3,4\n", "m.csv", {.header = CsvHeader::Present, .dtype = kFloat64});
  CHECK(t.columns == std::vector<std::string>{"1", "2"});
  CHECK(t.values.dtype() == kFloat64);
  CHECK(t.values.to_vector<double>() == std::vector<double>{3, 4});
  // Integers, exactly, beyond float's 24 bits.
  t = decode_csv("label\n16777217\n-3\n", "m.csv", {.dtype = kInt64});
  CHECK(t.values.to_vector<int64_t>() == std::vector<int64_t>{16777217, -3});
  // A header and no rows: an empty (0, columns) table.
  t = decode_csv("a,b,c\n", "m.csv");
  CHECK(t.values.sizes() == Shape{0, 3});
  // nan and inf are numbers.
  t = decode_csv("nan,inf,-inf\n", "m.csv");
  const auto v = t.values.to_vector<float>();
  CHECK(std::isnan(v[0]));
  CHECK(std::isinf(v[1]));
}

TEST_CASE("malformed CSV is rejected with the file, line and column") {
  auto rejects = [](const std::string& text, const std::string& message, CsvOptions opts = {}) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(decode_csv(text, "data.csv", opts), doctest::Contains(message.c_str()), Error);
  };
  rejects("a,b\n1,2\n3,x4\n", "data.csv:3: column 2: 'x4' is not a number");
  rejects("1,2\n3\n", "data.csv:2: 1 fields, but line 1 has 2; every row needs the same number");
  rejects("a,b\n1,2,3\n", "data.csv:2: 3 fields, but line 1 has 2");
  rejects("1,,2\n", "data.csv:1: column 2 is empty");
  rejects("x,y\n", "data.csv:1: column 1: 'x' is not a number", {.header = CsvHeader::Absent});
  rejects("1.5\n", "data.csv:1: column 1: '1.5' is not an integer", {.dtype = kInt64});
  rejects("1e39\n", "data.csv:1: column 1: '1e39' is out of the range of float32");
  rejects("1e400\n", "'1e400' is out of the range of float64", {.dtype = kFloat64});
  rejects("99999999999999999999\n", "is out of the range of int64", {.dtype = kInt64});
  rejects("1,2\n3,+-4\n", "data.csv:2: column 2: '+-4' is not a number");
  rejects("", "data.csv: no rows");
  rejects("\n  \r\n", "data.csv: no rows");
  rejects("1\n", "CsvOptions.dtype must be float32, float64 or int64", {.dtype = DType::BFloat16});
  CHECK_THROWS_WITH_AS(read_csv("/nonexistent/d.csv"), doctest::Contains("/nonexistent/d.csv: no such file"), Error);
}
