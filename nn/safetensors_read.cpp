// safetensors_read.cpp: the strict reader of nn/safetensors.h: check every number in the header
// before trusting it, check each tensor's bytes against its checksum, then copy the data into
// fresh tensors. The writer is safetensors.cpp; the format itself is described in safetensors.h.
//
// Not here: memory mapping, anything that knows about Modules, or any conversion: every tensor loads
// in the dtype the file stores (F16 and BF16 as float16 and bfloat16 tensors).
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "nn/crc32c.h"
#include "nn/safetensors.h"
#include "nn/detail/safetensors_format.h"

namespace mt {
namespace {

using namespace detail;
// Not nlohmann::ordered_json: it finds keys by linear search, so a hostile 1 MB header of 100k keys
// takes a minute to parse. Where key order matters we keep it ourselves (see HeaderScan).
using Json = nlohmann::json;

// No legitimate header comes close; the reference implementation uses the same bound. Without one a
// 16-byte file could make us parse (and allocate for) whatever its length field claims.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// For error messages about untrusted names and values: at most 64 bytes (cut at a UTF-8 character
// boundary), control bytes escaped, so that a hostile header cannot turn one error line into many.
std::string printable(const std::string& s) {
  size_t cut = std::min<size_t>(s.size(), 64);
  while (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  std::string out = "'";
  for (unsigned char c : s.substr(0, cut)) {
    char buf[8];
    std::snprintf(buf, sizeof buf, c < 0x20 || c == 0x7f ? "\\x%02x" : "%c", c);
    out += buf;
  }
  return out + (cut < s.size() ? "...'" : "'");
}

// nlohmann's messages end with the offending token ("last read: '...'"), which can be megabytes
// of hostile bytes; keep the description and drop the token.
std::string json_error(const std::string& what) {
  size_t start = what.find("] ");
  std::string s = start == std::string::npos ? what : what.substr(start + 2);
  s = s.substr(0, s.find("; last read"));
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

// The first of two passes over the header: a SAX handler that sees the JSON as a stream of events
// and builds nothing. It is the only place where duplicate keys and the order of keys are visible
// (a parsed object keeps one of two equal keys silently, and sorts them), and it stops at nesting
// deeper than a valid header has, so that 50 million '[' never become 50 million arrays. Why not
// nlohmann's parser callback, which sees the same events: it rescans the parent object after each
// child object, which makes a header with 100k tensors take minutes.
class HeaderScan final : public nlohmann::json_sax<Json> {
 public:
  std::vector<std::string> top_keys;  // the root object's keys, in file order
  std::string error;                  // the first problem found; empty when there is none

  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return enter();
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error = "has the key " + printable(k) + " twice (duplicate keys are not allowed)";
      return false;
    }
    if (depth_ == 1) top_keys.push_back(k);
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    return leave();
  }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t, const std::string&, const Json::exception& e) override {
    error = "is not valid JSON: " + json_error(e.what());
    return false;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }

 private:
  // A valid header nests three deep: the root object, an entry object, its shape array.
  bool enter() {
    if (++depth_ <= 3) return true;
    error = "nests deeper than a safetensors header can";
    return false;
  }
  bool leave() { --depth_; return true; }
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // the keys seen so far in each open object
};

// One tensor as the header describes it, checked against itself and the data section's size.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // byte range in the data section
};

// Note [Hostile safetensors files]: a file may come from anywhere, so no number in it is used before
// it has been checked against something we trust. In order: the length prefix against the file size and
// kMaxHeaderBytes; the JSON syntax (nlohmann checks UTF-8 too), its nesting depth and duplicate
// keys; each entry's fields and types; the shape's element count for overflow; the byte range
// against the dtype and shape and against the data section; then all ranges together, which must
// tile the data section exactly (no overlaps, no holes: the spec forbids both, and a hole could
// smuggle data past a reader). Only then is anything allocated, and every allocation is bounded by
// the size of the file. Each failure is one line naming the file and the problem.

// MT_CHECK with the origin in front: every rejection starts with where the bytes came from.
#define CHECK_FILE(cond, ...) MT_CHECK(cond, origin_, ": ", __VA_ARGS__)

class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size, std::string origin)
      : data_(data), size_(size), origin_(std::move(origin)) {}

  SafetensorsFile decode() {
    CHECK_FILE(size_ >= 8, "file is ", size_, " bytes, shorter than the 8-byte header length");
    uint64_t n;
    std::memcpy(&n, data_, 8);
    CHECK_FILE(n <= kMaxHeaderBytes, "header length ", n, " is absurd (the limit is ",
               kMaxHeaderBytes, " bytes)");
    CHECK_FILE(n <= size_ - 8, "header length ", n, " runs past the end of the file (", size_,
               " bytes)");
    const char* header = reinterpret_cast<const char*>(data_ + 8);
    data_begin_ = 8 + n;
    data_size_ = size_ - data_begin_;

    // The spec requires the header to start with '{'; nlohmann alone would also skip a BOM or spaces.
    CHECK_FILE(n > 0 && header[0] == '{', "header is not a JSON object (it must start with '{')");
    std::vector<std::string> keys;  // the header's top-level keys, in file order
    Json root = parse_header(header, n, keys);

    SafetensorsFile file;
    std::vector<Entry> entries;
    for (const std::string& key : keys) {
      if (key == kMetadataKey) {
        file.metadata = parse_metadata(root.at(key));
      } else {
        entries.push_back(parse_entry(key, root.at(key)));
      }
    }
    check_tiling(entries);
    check_checksums(entries, file.metadata);

    for (const Entry& e : entries) {
      Tensor t = empty(e.shape, {.dtype = e.dtype});
      // memcpy, not a cast: the bytes sit at any alignment in our buffer.
      if (e.end > e.begin) {
        std::memcpy(t.raw_data(), data_ + data_begin_ + e.begin, e.end - e.begin);
      }
      file.tensors.emplace_back(e.name, std::move(t));
    }
    return file;
  }

 private:
  // Parses the header and appends its top-level keys to `top_keys` in file order.
  Json parse_header(const char* header, uint64_t n, std::vector<std::string>& top_keys) {
    HeaderScan scan;
    Json::sax_parse(header, header + n, &scan);
    CHECK_FILE(scan.error.empty(), "header ", scan.error);
    top_keys = std::move(scan.top_keys);
    Json root = Json::parse(header, header + n);  // cannot throw: the scan accepted these bytes
    CHECK_FILE(root.is_object(), "header is not a JSON object");
    return root;
  }

  std::map<std::string, std::string> parse_metadata(const Json& value) const {
    CHECK_FILE(value.is_object(), "'", kMetadataKey, "' is not an object of strings");
    std::map<std::string, std::string> metadata;
    for (const auto& [k, v] : value.items()) {
      CHECK_FILE(v.is_string(), "metadata value for ", printable(k), " is not a string");
      metadata[k] = v.get<std::string>();
    }
    return metadata;
  }

  // A non-negative JSON integer. nlohmann stores non-negative literals as unsigned, negative ones
  // as signed, and anything with a fraction or exponent (2.0, 1e3) as floating point.
  uint64_t non_negative(const Json& v, const std::string& where) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    CHECK_FILE(v.is_number_integer(), where, " is not an integer");
    int64_t i = v.get<int64_t>();
    CHECK_FILE(i >= 0, where, " is negative (", i, ")");
    return static_cast<uint64_t>(i);
  }

  Entry parse_entry(const std::string& name, const Json& value) const {
    const std::string what = "tensor " + printable(name);
    CHECK_FILE(value.is_object(), what, ": entry is not an object");
    for (const auto& [k, v] : value.items())
      CHECK_FILE(k == "dtype" || k == "shape" || k == "data_offsets", what,
                 ": unexpected field ", printable(k));
    CHECK_FILE(value.contains("dtype") && value.contains("shape") && value.contains("data_offsets"),
               what, ": entry needs dtype, shape and data_offsets");

    Entry e;
    e.name = name;
    const Json& dtype = value.at("dtype");
    CHECK_FILE(dtype.is_string(), what, ": dtype is not a string");
    const DTypeName* found = nullptr;
    for (const auto& d : kDTypeNames)
      if (dtype.get<std::string>() == d.name) found = &d;
    CHECK_FILE(found != nullptr, what, ": unsupported dtype ", printable(dtype.get<std::string>()),
               " (minitrain loads F32, F64, I64, BF16 and F16)");
    e.dtype = found->dtype;
    const size_t stored_size = element_size(e.dtype);  // bytes per element in the file

    // The element count must fit in int64 and so must every partial product of the sizes (Shape and
    // the stride code multiply them in both directions); zeros are skipped because [0, 2^40, 2^40]
    // is a fine empty tensor whose later products would still overflow.
    const Json& shape = value.at("shape");
    CHECK_FILE(shape.is_array(), what, ": shape is not an array");
    CHECK_FILE(shape.size() <= static_cast<size_t>(kMaxDims), what, ": shape has ", shape.size(),
               " dimensions, minitrain supports at most ", kMaxDims);
    int64_t nonzero_product = 1;  // the product of the sizes other than 0
    bool has_zero = false;
    for (const Json& s : shape) {
      uint64_t d = non_negative(s, what + ": a shape entry");
      bool fits = d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                  (d == 0 || !__builtin_mul_overflow(nonzero_product, static_cast<int64_t>(d),
                                                     &nonzero_product));
      CHECK_FILE(fits, what, ": shape overflows (its element count does not fit in 64 bits)");
      has_zero |= d == 0;
      e.shape.push_back(static_cast<int64_t>(d));
    }
    uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(nonzero_product);
    uint64_t nbytes;
    CHECK_FILE(!__builtin_mul_overflow(numel, stored_size, &nbytes), what,
               ": shape overflows (its byte count does not fit in 64 bits)");

    const Json& offsets = value.at("data_offsets");
    CHECK_FILE(offsets.is_array() && offsets.size() == 2, what,
               ": data_offsets is not an array [begin, end]");
    e.begin = non_negative(offsets[0], what + ": data_offsets begin");
    e.end = non_negative(offsets[1], what + ": data_offsets end");
    CHECK_FILE(e.begin <= e.end, what, ": data_offsets end ", e.end, " is before begin ", e.begin);
    CHECK_FILE(e.end - e.begin == nbytes, what, ": data_offsets [", e.begin, ", ", e.end, "] hold ",
               e.end - e.begin, " bytes, but ", dtype.get<std::string>(), " ", e.shape, " needs ",
               nbytes);
    CHECK_FILE(e.end <= data_size_, what, ": data_offsets [", e.begin, ", ", e.end,
               "] reach beyond the data section (", data_size_, " bytes)");
    return e;
  }

  // Takes the checksum keys out of `metadata`, checks that they match the tensors one to one, then
  // checks each tensor's bytes against its checksum (Note [Tensor checksums]).
  void check_checksums(const std::vector<Entry>& entries, std::map<std::string, std::string>& metadata) const {
    std::map<std::string, uint32_t> stored;  // tensor name -> its checksum
    const std::string prefix = kChecksumPrefix;
    for (auto it = metadata.lower_bound(prefix); it != metadata.end() && it->first.rfind(prefix, 0) == 0;) {
      const std::string name = it->first.substr(prefix.size());
      const std::string& hex = it->second;
      CHECK_FILE(hex.size() == kChecksumDigits && hex.find_first_not_of("0123456789abcdef") == std::string::npos,
                 "the checksum of tensor ", printable(name), " is ", printable(hex),
                 ", not 8 lowercase hex digits: the header is damaged");
      stored[name] = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
      it = metadata.erase(it);
    }
    if (stored.empty()) return;  // a file from elsewhere, or from before checksums: nothing to check
    for (const Entry& e : entries)
      CHECK_FILE(stored.count(e.name), "tensor ", printable(e.name),
                 " has no checksum though the file's other tensors do: the header is damaged");
    std::set<std::string> names;
    for (const Entry& e : entries) names.insert(e.name);
    for (const auto& [name, crc] : stored)
      CHECK_FILE(names.count(name), "the metadata holds a checksum for tensor ", printable(name),
                 ", which the file does not have: the header is damaged");
    for (const Entry& e : entries) {
      const uint32_t computed = crc32c(data_ + data_begin_ + e.begin, e.end - e.begin);
      CHECK_FILE(computed == stored.at(e.name), "tensor ", printable(e.name), " fails its checksum (stored ",
                 checksum_hex(stored.at(e.name)), ", computed ", checksum_hex(computed), "): the file is damaged");
    }
  }

  // Sorts `entries` into data order and checks that they cover the data section exactly.
  void check_tiling(std::vector<Entry>& entries) const {
    // Stable, so that empty tensors at one offset keep their header order (Note [Data order]).
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;  // the data section [0, covered) belongs to the tensors seen so far
    const Entry* last = nullptr;
    for (const Entry& e : entries) {
      CHECK_FILE(e.begin >= covered, "tensors ", printable(last ? last->name : ""), " and ",
                 printable(e.name), " overlap in the data section");
      CHECK_FILE(e.begin == covered, "hole in the data section: bytes [", covered, ", ", e.begin,
                 ") belong to no tensor");
      covered = e.end;
      last = &e;
    }
    CHECK_FILE(covered == data_size_, "hole in the data section: bytes [", covered, ", ",
               data_size_, ") at its end belong to no tensor");
  }

  const uint8_t* data_;
  size_t size_;
  std::string origin_;
  uint64_t data_begin_ = 0;  // offset of the data section in the file
  uint64_t data_size_ = 0;
};

#undef CHECK_FILE

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  auto fail = [&](const char* what) {
    int err = errno;
    MT_FAIL("load_safetensors: ", what, " '", path, "': ", std::strerror(err));
  };
  // Checked before opening as well as after: opening a FIFO with no writer waits forever, and a
  // directory opens fine and fails only on read, with a less helpful message.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail("cannot open");
  MT_CHECK(S_ISREG(st.st_mode), "load_safetensors: '", path, "' is not a regular file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail("cannot open");
  if (::fstat(::fileno(f.get()), &st) != 0) fail("cannot stat");
  MT_CHECK(S_ISREG(st.st_mode), "load_safetensors: '", path, "' is not a regular file");
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  // A file that shrank while we read it comes back short; decode then says what is missing.
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f.get()));
  if (std::ferror(f.get())) fail("cannot read");
  return decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

SafetensorsFile decode_safetensors(const uint8_t* data, size_t size, const std::string& origin) {
  return Decoder(data, size, origin).decode();
}

}  // namespace mt
