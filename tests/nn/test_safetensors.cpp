// Tests for nn/safetensors: round trips of every dtype and awkward shape, metadata, one hand-built
// file per rejection rule of the reader, the tensor checksums, and the atomic-save guarantees with
// the paths a save writes through or refuses (Note [Output files]).
//
// Python interop (tests/nn/safetensors_roundtrip.py) uses the two "safetensors interop" cases at the
// end, which doctest skips unless run with --no-skip. The script drives the hand-off itself, so one
// CTest entry is enough; it skips with exit code 77 when numpy is missing:
//   add_test(NAME safetensors_python_interop COMMAND ${Python3_EXECUTABLE}
//            ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_roundtrip.py $<TARGET_FILE:test_nn>
//            ${CMAKE_CURRENT_BINARY_DIR}/safetensors_interop)
//   set_tests_properties(safetensors_python_interop PROPERTIES SKIP_RETURN_CODE 77)
// It runs `test_nn --no-skip --test-case="safetensors interop: write for python"` with
// MT_SAFETENSORS_INTEROP_DIR set, checks from_cpp.safetensors, writes from_python.safetensors, then
// runs the "read from python" case, which leaves from_python.ok behind when its checks pass.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"

namespace fs = std::filesystem;
using mt::Tensor;

namespace {

// A fresh directory under /tmp, removed with everything in it at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("mt_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Leftover temporaries from a save (path + ".tmp.<pid>").
  int temp_files() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(path))
      n += e.path().filename().string().find(".tmp.") != std::string::npos;
    return n;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

mt::SafetensorsFile decode(const std::string& bytes, const std::string& origin = "test.safetensors") {
  return mt::decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), origin);
}

const Tensor& find(const mt::SafetensorsFile& f, const std::string& name) {
  auto it = std::find_if(f.tensors.begin(), f.tensors.end(), [&](const auto& p) { return p.first == name; });
  REQUIRE_MESSAGE(it != f.tensors.end(), "no tensor named " << name);
  return it->second;
}

// A safetensors file by hand: the 8-byte length, `header` as given (no padding), `data_bytes` zeros.
std::string file_of(const std::string& header, size_t data_bytes = 0) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + std::string(data_bytes, '\0');
}

std::string with_length(uint64_t n, const std::string& rest) {
  return std::string(reinterpret_cast<const char*>(&n), 8) + rest;
}

// The message of the mt::Error that decoding `bytes` throws; "" when it does not throw. Any other
// exception type escapes and fails the test: the reader must only ever throw mt::Error.
std::string decode_error(const std::string& bytes) {
  try {
    decode(bytes, "bad.safetensors");
  } catch (const mt::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors: save and load keep names, dtypes, shapes and values") {
  TempDir dir;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor w = mt::from_vector(std::vector<float>{-1.f, 0.5f, 1e-30f, 3.f, -0.f, 6.25f}, {2, 3});
  mt::NamedTensors saved = {
      {"w", w},
      {"w_t", w.t()},  // non-contiguous: saved as its row-major values, [3, 2]
      {"scalar", mt::scalar_tensor(3.5)},
      {"empty", mt::zeros({0, 3})},
      {"d", mt::from_vector(std::vector<double>{0.1, -inf, 1e300, 5e-324}, {2, 2})},
      {"labels", mt::from_vector(std::vector<int64_t>{-3, 0, big, 9007199254740993}, {4})},
      {"no_labels", mt::zeros({0}, {.dtype = mt::kInt64})},
  };
  REQUIRE_FALSE(saved[1].second.is_contiguous());

  mt::save_safetensors(dir.file("m.safetensors"), saved);
  // The file is exactly what encode produces, and the data section starts 8-byte aligned.
  std::string bytes = read_bytes(dir.file("m.safetensors"));
  CHECK(bytes == mt::encode_safetensors(saved));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);

  mt::SafetensorsFile loaded = mt::load_safetensors(dir.file("m.safetensors"));
  // Note [Data order]: 8-byte dtypes first, then 4-byte ones, each group in the order given.
  std::vector<std::string> names;
  for (const auto& [name, t] : loaded.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"d", "labels", "no_labels", "w", "w_t", "scalar", "empty"});
  CHECK(loaded.metadata.empty());

  for (const auto& item : saved) {
    const std::string& name = item.first;  // not a structured binding: CAPTURE needs a lambda capture
    const Tensor& original = item.second;
    CAPTURE(name);
    const Tensor& t = find(loaded, name);
    CHECK(t.dtype() == original.dtype());
    CHECK(t.sizes() == original.sizes());
    CHECK(t.is_contiguous());
    if (t.dtype() == mt::kFloat32) CHECK(t.to_vector<float>() == original.to_vector<float>());
    if (t.dtype() == mt::kFloat64) CHECK(t.to_vector<double>() == original.to_vector<double>());
    if (t.dtype() == mt::kInt64) CHECK(t.to_vector<int64_t>() == original.to_vector<int64_t>());
  }
  CHECK(find(loaded, "w_t").to_vector<float>() ==
        std::vector<float>{-1.f, 3.f, 0.5f, -0.f, 1e-30f, 6.25f});
  CHECK(find(loaded, "scalar").dim() == 0);
  CHECK(dir.temp_files() == 0);
}

TEST_CASE("safetensors: metadata round trip, and an empty file is valid") {
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"epoch", "3"}, {"note", "h\u00e9llo \"quoted\"\n"}, {"", "empty key"}};
  mt::SafetensorsFile f = decode(mt::encode_safetensors({{"x", mt::ones({2})}}, meta));
  CHECK(f.metadata == meta);
  CHECK(f.tensors.size() == 1);

  mt::SafetensorsFile none = decode(mt::encode_safetensors({}));
  CHECK(none.tensors.empty());
  CHECK(none.metadata.empty());
}

TEST_CASE("safetensors: a file from another writer, in its own order, loads in data order") {
  // Header lists "b" first, but "a"'s data comes first; no padding; an empty tensor in between.
  std::string header = R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
                       R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                       R"("a":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})";
  std::string bytes = file_of(header);
  double a = 2.5;
  int64_t b = -7;
  bytes.append(reinterpret_cast<const char*>(&a), 8).append(reinterpret_cast<const char*>(&b), 8);
  mt::SafetensorsFile f = decode(bytes);
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].first == "a");
  CHECK(f.tensors[0].second.item() == 2.5);
  CHECK(f.tensors[1].first == "e");
  CHECK(f.tensors[2].first == "b");
  CHECK(f.tensors[2].second.to_vector<int64_t>() == std::vector<int64_t>{-7});
}

// Parsers that are quadratic in the number of keys (nlohmann's ordered_json, its parse callback)
// take minutes on this 6 MB header; ours takes well under a second. Every tensor is empty and at
// offset 0, so only the header's own order can order them.
TEST_CASE("safetensors: a header with 100k entries loads fast, in its order" * doctest::timeout(30)) {
  const int n = 100000;
  std::string header = "{";
  for (int i = n - 1; i >= 0; --i)
    header += "\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})" +
              (i ? "," : "}");
  mt::SafetensorsFile f = decode(file_of(header));
  REQUIRE(f.tensors.size() == n);
  CHECK(f.tensors.front().first == "t99999");
  CHECK(f.tensors.back().first == "t0");
}

TEST_CASE("safetensors: every malformed file is one clear mt::Error") {
  // {"a": F32 [2] at [0, 8]} is valid with 8 data bytes; each case breaks one rule.
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
  };
  const std::string ok = entry(R"("F32")", "[2]", "[0,8]");
  REQUIRE(decode_error(file_of(R"({"a":)" + ok + "}", 8)).empty());

  struct Case {
    const char* what;
    std::string bytes;
    const char* word;  // the message must contain this
  };
  const std::vector<Case> cases = {
      {"shorter than 8 bytes", "abc", "shorter"},
      {"absurd header length", with_length(uint64_t{1} << 40, "{}"), "absurd"},
      {"header past the end", with_length(100, "{}      "), "past the end"},
      {"empty header", file_of(""), "JSON object"},
      {"header not JSON", file_of("{not json}"), "not valid JSON"},
      {"truncated JSON", file_of(R"({"a":)"), "not valid JSON"},
      {"header an array", file_of("[1,2]"), "JSON object"},
      {"header a BOM then object", file_of("\xEF\xBB\xBF{}"), "JSON object"},
      {"invalid UTF-8", file_of("{\"\xff\":1}"), "not valid JSON"},
      {"entry not an object", file_of(R"({"a":1})"), "not an object"},
      {"missing dtype", file_of(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), "needs dtype"},
      {"unexpected field", file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
       "unexpected field"},
      {"dtype not a string", file_of(R"({"a":)" + entry("32", "[2]", "[0,8]") + "}", 8), "dtype"},
      {"unsupported dtype", file_of(R"({"a":)" + entry(R"("U8")", "[4]", "[0,8]") + "}", 8),
       "unsupported dtype 'U8'"},
      {"unknown dtype", file_of(R"({"a":)" + entry(R"("Q7")", "[2]", "[0,8]") + "}", 8),
       "unsupported dtype"},
      {"shape not an array", file_of(R"({"a":)" + entry(R"("F32")", "2", "[0,8]") + "}", 8),
       "shape is not an array"},
      {"negative shape", file_of(R"({"a":)" + entry(R"("F32")", "[-2]", "[0,8]") + "}", 8), "negative"},
      {"fractional shape", file_of(R"({"a":)" + entry(R"("F32")", "[1.5]", "[0,8]") + "}", 8),
       "not an integer"},
      {"float shape", file_of(R"({"a":)" + entry(R"("F32")", "[2.0]", "[0,8]") + "}", 8),
       "not an integer"},
      {"string shape", file_of(R"({"a":)" + entry(R"("F32")", R"(["2"])", "[0,8]") + "}", 8),
       "not an integer"},
      {"element count overflow",
       file_of(R"({"a":)" + entry(R"("F32")", "[4294967296,4294967296]", "[0,8]") + "}", 8), "overflows"},
      {"byte count overflow",
       file_of(R"({"a":)" + entry(R"("F64")", "[4611686018427387904]", "[0,8]") + "}", 8), "overflows"},
      {"shape beyond uint64", file_of(R"({"a":)" + entry(R"("F32")", "[1e30]", "[0,8]") + "}", 8),
       "not an integer"},
      {"too many dimensions",
       file_of(R"({"a":)" + entry(R"("F32")", "[1,1,1,1,1,1,1,1,2]", "[0,8]") + "}", 8), "dimensions"},
      {"nested shape", file_of(R"({"a":)" + entry(R"("F32")", "[[2]]", "[0,8]") + "}", 8), "nests deeper"},
      {"offsets not a pair", file_of(R"({"a":)" + entry(R"("F32")", "[2]", "[0,8,8]") + "}", 8),
       "data_offsets"},
      {"end before begin", file_of(R"({"a":)" + entry(R"("F32")", "[0]", "[8,0]") + "}", 8),
       "before begin"},
      {"size mismatch", file_of(R"({"a":)" + entry(R"("F32")", "[3]", "[0,8]") + "}", 8), "needs 12"},
      {"beyond the data", file_of(R"({"a":)" + ok + "}", 4), "beyond the data section"},
      {"overlap", file_of(R"({"a":)" + ok + R"(,"b":)" + entry(R"("F32")", "[2]", "[4,12]") + "}", 12),
       "overlap"},
      {"hole between", file_of(R"({"a":)" + ok + R"(,"b":)" + entry(R"("F32")", "[2]", "[12,20]") + "}", 20),
       "hole"},
      {"hole at the end", file_of(R"({"a":)" + ok + "}", 12), "hole"},
      {"duplicate name", file_of(R"({"a":)" + ok + R"(,"a":)" + ok + "}", 8), "twice"},
      {"duplicate field", file_of(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
       "twice"},
      {"metadata not an object", file_of(R"({"__metadata__":[]})"), "__metadata__"},
      {"metadata value not a string", file_of(R"({"__metadata__":{"epoch":3}})"), "not a string"},
      // Note [Tensor checksums]: the checksums in the metadata must match the tensors one to one.
      {"checksum not 8 hex digits", file_of(R"({"__metadata__":{"mt.crc32c.a":"E3069283"},"a":)" + ok + "}", 8),
       "not 8 lowercase hex digits"},
      {"checksum of a tensor not there",
       file_of(R"({"__metadata__":{"mt.crc32c.a":"00000000","mt.crc32c.b":"00000000"},"a":)" + ok + "}", 8),
       "checksum for tensor 'b', which the file does not have"},
      {"a tensor without a checksum among tensors with one",
       file_of(R"({"__metadata__":{"mt.crc32c.a":"00000000"},"a":)" + ok + R"(,"b":)" +
               entry(R"("F32")", "[2]", "[8,16]") + "}", 16),
       "tensor 'b' has no checksum"},
      {"data that fails its checksum", file_of(R"({"__metadata__":{"mt.crc32c.a":"00000001"},"a":)" + ok + "}", 8),
       "tensor 'a' fails its checksum"},
      {"hostile name, kept to one short line",
       file_of(R"({"\n)" + std::string(100, 'x') + R"(":)" + entry(R"("U8")", "[4]", "[0,8]") + "}", 8),
       "'\\x0axxxx"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::string message = decode_error(c.bytes);
    CAPTURE(message);
    CHECK(message.find(c.word) != std::string::npos);
    CHECK(message.rfind("bad.safetensors: ", 0) == 0);  // names the file first
    CHECK(message.find('\n') == std::string::npos);     // one line
    CHECK(message.size() < 300);                        // and a short one
  }
}

TEST_CASE("safetensors: F16 and BF16 tensors load as themselves, and save as themselves") {
  // Bit patterns with known values (IEEE 754 binary16; bfloat16 = the top 16 bits of a float32).
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x8000};
  const std::vector<float> f16_values = {1.0f, -2.0f, 0.333251953125f, 65504.0f, 0x1p-24f, -0.0f};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC0A0, 0x3EAB};
  const std::vector<float> bf16_values = {1.0f, -5.0f, 0.333984375f};
  std::string bytes = file_of(R"({"h":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
                              R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[12,18]}})");
  bytes.append(reinterpret_cast<const char*>(f16.data()), 12);
  bytes.append(reinterpret_cast<const char*>(bf16.data()), 6);
  const mt::SafetensorsFile f = decode(bytes);
  const Tensor& h = find(f, "h");
  CHECK(h.dtype() == mt::kFloat16);
  CHECK(h.sizes() == mt::Shape{2, 3});
  CHECK(h.to_vector<float>() == f16_values);
  CHECK(std::signbit(h.to_vector<float>()[5]));
  CHECK(find(f, "b").dtype() == mt::kBFloat16);
  CHECK(find(f, "b").to_vector<float>() == bf16_values);
  // A half-precision entry's byte range is checked against 2 bytes per element, not 4.
  CHECK(decode_error(file_of(R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,12]}})", 12))
            .find("needs 6") != std::string::npos);

  // Saved, they keep their dtype names and their 2-byte patterns, after the wider tensors.
  TempDir dir;
  const std::string path = dir.file("half.safetensors");
  mt::save_safetensors(path, {{"b", find(f, "b")}, {"h", h}, {"w", mt::ones({2})}});
  const std::string saved = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, saved.data(), 8);
  const auto header = nlohmann::json::parse(saved.substr(8, n));
  CHECK(header["b"]["dtype"] == "BF16");
  CHECK(header["h"]["dtype"] == "F16");
  CHECK(header["w"]["data_offsets"][0] == 0);  // Note [Data order]: 4-byte dtypes first
  const uint64_t begin = header["h"]["data_offsets"][0];
  CHECK(std::memcmp(saved.data() + 8 + n + begin, f16.data(), 12) == 0);
  const mt::SafetensorsFile back = mt::load_safetensors(path);
  CHECK(find(back, "h").dtype() == mt::kFloat16);
  CHECK(find(back, "b").to_vector<float>() == bf16_values);
}

// Note [Tensor checksums]: what a flipped bit in a saved model looks like to the one who loads it.
TEST_CASE("safetensors: a tensor whose bytes changed on disk is refused, naming the file and the tensor") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Tensor w = mt::from_vector(std::vector<float>{0.5f, -1.f, 2.f, 4.f}, {2, 2});
  mt::save_safetensors(path, {{"0.weight", w}, {"0.bias", mt::zeros({2})}}, {{"epoch", "3"}});

  // Intact, it loads; its checksums are the file's business, not part of the caller's metadata.
  mt::SafetensorsFile intact = mt::load_safetensors(path);
  CHECK(intact.metadata == std::map<std::string, std::string>{{"epoch", "3"}});
  CHECK(find(intact, "0.weight").to_vector<float>() == w.to_vector<float>());

  // One bit of 0.weight's data flipped, found through the header as any reader would find it.
  std::string bytes = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"]["mt.crc32c.0.weight"].get<std::string>().size() == 8);
  const uint64_t begin = header["0.weight"]["data_offsets"][0];
  bytes[8 + n + begin + 5] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  CHECK_THROWS_WITH_AS(mt::load_safetensors(path),
                       doctest::Contains((path + ": tensor '0.weight' fails its checksum (stored ").c_str()),
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::load_safetensors(path), doctest::Contains("): the file is damaged"), mt::Error);
}

TEST_CASE("safetensors: files without checksums (Python's, older ones) still load, unchecked") {
  // As the safetensors package writes them: metadata of its own, or none, and no mt.crc32c keys.
  const std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes = file_of(header);
  const float w[2] = {1.5f, -2.f};
  bytes.append(reinterpret_cast<const char*>(w), 8);
  mt::SafetensorsFile f = decode(bytes);
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(find(f, "w").to_vector<float>() == std::vector<float>{1.5f, -2.f});
  // Nothing to check a changed byte against: it loads as it is.
  bytes.back() ^= 0x01;
  CHECK_NOTHROW(decode(bytes));
}

TEST_CASE("safetensors: saving refuses names and tensors it cannot write") {
  Tensor x = mt::ones({2});
  CHECK_THROWS_AS(mt::encode_safetensors({{"a", x}, {"a", x}}), mt::Error);
  CHECK_THROWS_AS(mt::encode_safetensors({{"__metadata__", x}}), mt::Error);
  CHECK_THROWS_AS(mt::encode_safetensors({{"a", Tensor()}}), mt::Error);
  CHECK_THROWS_AS(mt::encode_safetensors({{"\xff", x}}), mt::Error);  // not UTF-8: not JSON
  // The checksum keys belong to the file (Note [Tensor checksums]); the caller's metadata cannot use them.
  CHECK_THROWS_WITH_AS(mt::encode_safetensors({{"a", x}}, {{"mt.crc32c.a", "00000000"}}),
                       doctest::Contains("reserved for the file's own tensor checksums"), mt::Error);
}

TEST_CASE("safetensors: saves are atomic and clean up after themselves") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  mt::save_safetensors(path, {{"x", mt::full({3}, 1.0)}});
  const std::string good = read_bytes(path);

  SUBCASE("a missing directory is an error naming the path and the OS error") {
    const std::string missing = dir.file("no/such/dir/model.safetensors");
    CHECK_THROWS_WITH_AS(mt::save_safetensors(missing, {{"x", mt::ones({1})}}),
                         doctest::Contains("no/such/dir/model.safetensors"), mt::Error);
    CHECK_THROWS_WITH_AS(mt::save_safetensors(missing, {{"x", mt::ones({1})}}),
                         doctest::Contains("No such file or directory"), mt::Error);
    // The path the caller gave comes first; the temporary's name only after it.
    const std::string names_target = "cannot create '" + missing + "' (its temporary";
    CHECK_THROWS_WITH_AS(mt::save_safetensors(missing, {{"x", mt::ones({1})}}),
                         doctest::Contains(names_target.c_str()), mt::Error);
    CHECK(read_bytes(path) == good);
  }
  SUBCASE("bad input fails before the old file is touched") {
    CHECK_THROWS_AS(mt::save_safetensors(path, {{"x", mt::ones({1})}, {"x", mt::ones({1})}}), mt::Error);
    CHECK(read_bytes(path) == good);
  }
  SUBCASE("a folder in the way is refused before anything is written") {
    const std::string target = dir.file("is_a_dir");
    fs::create_directories(fs::path(target) / "keep");
    CHECK_THROWS_WITH_AS(mt::save_safetensors(target, {{"x", mt::ones({1})}}),
                         doctest::Contains("is_a_dir: not a regular file (a directory); give a file path"), mt::Error);
    CHECK(fs::is_directory(fs::path(target) / "keep"));
  }
  SUBCASE("a successful save replaces the old file") {
    mt::save_safetensors(path, {{"y", mt::zeros({2})}});
    CHECK(mt::load_safetensors(path).tensors.at(0).first == "y");
  }
  CHECK(dir.temp_files() == 0);
}

// Note [Output files] through save_safetensors: the path decides, before any byte is written.
TEST_CASE("safetensors: a save writes through a symlink and refuses devices, FIFOs and folders") {
  TempDir dir;
  const mt::NamedTensors weights = {{"w", mt::full({3}, 2.0)}};
  SUBCASE("a symlink: its file gets the model, the link stays a link") {
    fs::create_directories(dir.path / "store");
    const std::string real = dir.file("store/model.safetensors");
    fs::create_symlink("store/model.safetensors", dir.path / "latest.safetensors");  // relative, dangling
    mt::save_safetensors(dir.file("latest.safetensors"), weights);
    CHECK(fs::is_symlink(dir.path / "latest.safetensors"));
    CHECK(mt::load_safetensors(real).tensors.at(0).first == "w");
    mt::save_safetensors(dir.file("latest.safetensors"), {{"v", mt::ones({1})}});  // and again, over the file
    CHECK(fs::is_symlink(dir.path / "latest.safetensors"));
    CHECK(mt::load_safetensors(real).tensors.at(0).first == "v");
    CHECK(dir.temp_files() == 0);
  }
  SUBCASE("a FIFO is refused, not opened (which would wait for a reader)") {
    REQUIRE(::mkfifo(dir.file("pipe").c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(mt::save_safetensors(dir.file("pipe"), weights),
                         doctest::Contains("pipe: not a regular file (a FIFO); give a file path"), mt::Error);
    CHECK(fs::is_fifo(dir.path / "pipe"));
  }
  SUBCASE("a character device (our own copy of /dev/null, made in the temp folder) is left alone") {
    const std::string null = dir.file("null");
    if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
      MESSAGE("skipped: cannot mknod a device node here (", std::strerror(errno), "): needs root");
      return;
    }
    CHECK_THROWS_WITH_AS(mt::save_safetensors(null, weights),
                         doctest::Contains("null: not a regular file (a character device); give a file path"),
                         mt::Error);
    CHECK(fs::is_character_file(null));
    // Through a symlink, the device is refused the same way.
    fs::create_symlink(null, dir.path / "to-null");
    CHECK_THROWS_WITH_AS(mt::save_safetensors(dir.file("to-null"), weights),
                         doctest::Contains("not a regular file (a character device)"), mt::Error);
  }
  CHECK(dir.temp_files() == 0);
}

TEST_CASE("safetensors: loading names the path when the file cannot be read") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(mt::load_safetensors(dir.file("absent.safetensors")),
                       doctest::Contains("absent.safetensors': No such file or directory"), mt::Error);
  CHECK_THROWS_WITH_AS(mt::load_safetensors(dir.path.string()), doctest::Contains("not a regular file"),
                       mt::Error);
  // A FIFO is refused before it is opened: opening one that has no writer would wait forever.
  REQUIRE(::mkfifo(dir.file("pipe.safetensors").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(mt::load_safetensors(dir.file("pipe.safetensors")), doctest::Contains("not a regular file"),
                       mt::Error);
  std::ofstream(dir.file("short.safetensors")) << "abc";
  CHECK_THROWS_WITH_AS(mt::load_safetensors(dir.file("short.safetensors")),
                       doctest::Contains("short.safetensors: file is 3 bytes"), mt::Error);
}

// ---- Python interop (tests/nn/safetensors_roundtrip.py runs these; see the top of this file) ---------

namespace {
std::string interop_dir() {
  const char* dir = std::getenv("MT_SAFETENSORS_INTEROP_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "run through tests/nn/safetensors_roundtrip.py");
  return dir;
}
}  // namespace

TEST_CASE("safetensors interop: write for python" * doctest::skip()) {
  Tensor w = mt::from_vector(std::vector<float>{-1.f, -0.5f, 0.f, 0.5f, 1.f, 1.5f}, {2, 3});
  mt::save_safetensors(
      interop_dir() + "/from_cpp.safetensors",
      {{"w", w},
       {"w_t", w.t()},
       {"d", mt::from_vector(std::vector<double>{0.1, -2.5, 1e300}, {3})},
       {"i", mt::from_vector(std::vector<int64_t>{-3, 9007199254740993}, {2})},  // 2^53 + 1: not a double
       {"s", mt::scalar_tensor(7.25)},
       {"e", mt::zeros({0, 4})}},
      {{"producer", "minitrain"}, {"note", "h\u00e9llo"}});
}

TEST_CASE("safetensors interop: read from python" * doctest::skip()) {
  const std::string dir = interop_dir();
  mt::SafetensorsFile f = mt::load_safetensors(dir + "/from_python.safetensors");
  // REQUIRE, not CHECK: any failure must stop before the .ok file below is written.
  REQUIRE(f.metadata == std::map<std::string, std::string>{{"producer", "numpy"}});
  REQUIRE(f.tensors.size() == 4);
  REQUIRE(find(f, "x").sizes() == mt::Shape{2, 2});
  REQUIRE(find(f, "x").to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f, 4.f});
  REQUIRE(find(f, "y").to_vector<int64_t>() == std::vector<int64_t>{-1, 0, int64_t{1} << 62});
  REQUIRE(find(f, "z").dim() == 0);
  REQUIRE(find(f, "z").dtype() == mt::kFloat64);
  REQUIRE(find(f, "z").item() == 2.5);
  REQUIRE(find(f, "empty").sizes() == mt::Shape{0});
  // The script looks for this file: a run whose filter matched no test case would leave none.
  std::ofstream(dir + "/from_python.ok") << "ok\n";
}
