// CSV: a reader for numeric tables, one row per line, fields separated by commas, e.g.
//
//   x0,x1,y          <- optional header row
//   0.5,1e-3,1
//   -2,3.25,0
//
// What it does: numbers in any form std::from_chars accepts (plus a leading '+'), spaces around
// fields, CRLF line endings, blank lines (skipped), a header row that is detected (any field that is
// text) or declared; every row must have as many fields as the first. Errors name the file,
// the line and the column (1-based field number) and quote the offending text.
// What it does not do: quoted fields containing commas, escapes, missing values (an empty field is an
// error, not NaN), other separators, non-numeric columns.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace mt::data {

enum class CsvHeader {
  Auto,     // the first row is a header when any of its fields is text (neither a number nor empty)
  Present,  // the first row is a header
  Absent,   // every row is data
};

struct CsvOptions {
  CsvHeader header = CsvHeader::Auto;
  DType dtype = kFloat32;  // kFloat32, kFloat64, or kInt64 (then every field must be an integer)
};

struct CsvTable {
  std::vector<std::string> columns;  // the header's names (surrounding quotes removed); empty without one
  Tensor values;                     // (rows, columns), contiguous CPU, of CsvOptions::dtype
};

// Errors start with "path:line:".
CsvTable read_csv(const std::string& path, CsvOptions opts = {});
// The same from text in memory; `origin` names it in errors.
CsvTable decode_csv(std::string_view text, const std::string& origin, CsvOptions opts = {});

}  // namespace mt::data
