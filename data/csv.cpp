// csv.cpp: split lines and fields, decide whether the first row is a header, parse every field with
// std::from_chars (locale-independent, exact, no exceptions), and stack the rows into a tensor.
#include "data/csv.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "data/detail/file_io.h"

namespace mt::data {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  for (size_t start = 0;;) {
    const size_t comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

enum class Parse { Ok, NotANumber, OutOfRange };

// The whole field must be the number. from_chars takes no '+', so one is skipped here ("+-1" is not
// a number).
template <typename T>
Parse parse_number(std::string_view field, T& out) {
  if (field.size() > 1 && field[0] == '+' && field[1] != '-') field.remove_prefix(1);
  if (field.empty()) return Parse::NotANumber;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, out);
  if (ec == std::errc::result_out_of_range && ptr == end) return Parse::OutOfRange;
  return ec == std::errc() && ptr == end ? Parse::Ok : Parse::NotANumber;
}

bool is_number(std::string_view field) {
  double unused;
  return parse_number(field, unused) != Parse::NotANumber;
}

// A header name: its text, without one pair of surrounding double quotes.
std::string column_name(std::string_view field) {
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') field = field.substr(1, field.size() - 2);
  return std::string(field);
}

class Reader {
 public:
  Reader(const std::string& origin, CsvOptions opts) : origin_(origin), opts_(opts) {}

  void row(std::string_view line, int64_t line_no) {
    const std::vector<std::string_view> fields = split_fields(line);
    if (columns_ < 0) {
      columns_ = static_cast<int64_t>(fields.size());
      first_line_ = line_no;
      if (is_header(fields)) {
        for (std::string_view f : fields) table_.columns.push_back(column_name(f));
        return;
      }
    }
    MT_CHECK(static_cast<int64_t>(fields.size()) == columns_, origin_, ":", line_no, ": ", fields.size(),
             " fields, but line ", first_line_, " has ", columns_, "; every row needs the same number");
    for (size_t c = 0; c < fields.size(); ++c) value(fields[c], line_no, static_cast<int64_t>(c) + 1);
    ++rows_;
  }

  CsvTable finish() {
    MT_CHECK(columns_ >= 0, origin_, ": no rows (the file is empty or blank)");
    const Shape shape{rows_, columns_};
    if (opts_.dtype == kInt64) {
      table_.values = from_vector(ints_, shape);
    } else {
      table_.values = from_vector(floats_, shape, {.dtype = opts_.dtype});
    }
    return std::move(table_);
  }

 private:
  bool is_header(const std::vector<std::string_view>& fields) const {
    if (opts_.header != CsvHeader::Auto) return opts_.header == CsvHeader::Present;
    for (std::string_view f : fields)
      if (!f.empty() && !is_number(f)) return true;  // text; an empty field is a missing value
    return false;
  }

  void value(std::string_view field, int64_t line_no, int64_t column) {
    MT_CHECK(!field.empty(), origin_, ":", line_no, ": column ", column, " is empty (missing values are not supported)");
    Parse result;
    if (opts_.dtype == kInt64) {
      int64_t v = 0;
      result = parse_number(field, v);
      ints_.push_back(v);
    } else {
      double v = 0;
      result = parse_number(field, v);
      // Finite in float64 but not in float32 would silently become infinity.
      if (result == Parse::Ok && opts_.dtype == kFloat32 && std::isfinite(v) &&
          std::fabs(v) > std::numeric_limits<float>::max())
        result = Parse::OutOfRange;
      floats_.push_back(v);
    }
    MT_CHECK(result != Parse::OutOfRange, origin_, ":", line_no, ": column ", column, ": ",
             detail::printable(field), " is out of the range of ", opts_.dtype);
    MT_CHECK(result == Parse::Ok, origin_, ":", line_no, ": column ", column, ": ", detail::printable(field),
             opts_.dtype == kInt64 ? " is not an integer" : " is not a number");
  }

  const std::string& origin_;
  CsvOptions opts_;
  CsvTable table_;
  int64_t columns_ = -1;  // set by the first row
  int64_t first_line_ = 0;
  int64_t rows_ = 0;
  std::vector<double> floats_;
  std::vector<int64_t> ints_;
};

}  // namespace

CsvTable decode_csv(std::string_view text, const std::string& origin, CsvOptions opts) {
  MT_CHECK(opts.dtype == kFloat32 || opts.dtype == kFloat64 || opts.dtype == kInt64, origin,
           ": CsvOptions.dtype must be float32, float64 or int64, got ", opts.dtype);
  Reader reader(origin, opts);
  int64_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t newline = text.find('\n', start);
    const size_t end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) continue;
    reader.row(line, line_no);
  }
  return reader.finish();
}

CsvTable read_csv(const std::string& path, CsvOptions opts) { return decode_csv(read_file(path), path, opts); }

}  // namespace mt::data
