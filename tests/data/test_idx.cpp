// IDX files (plain and gzip) and Fashion-MNIST: small files written here read back exactly, every
// kind of broken file is one telling error, and the real dataset loads when it is installed.
#include <doctest/doctest.h>

#include <filesystem>

#include "data/fashion_mnist.h"
#include "data/detail/file_io.h"
#include "data/idx.h"
#include "tensor/raw_ops.h"
#include "test_util.h"

using namespace mt;
using namespace mt::data;
using mt::test::bytes;
using mt::test::gzip;
using mt::test::u8;

namespace {

// A 2×3 image file: magic 0x00000803... with 3 dims (1, 2, 3), then six pixel bytes.
const std::string kImages = bytes({0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 1, 2, 127, 254, 255});
const std::string kLabels = bytes({0, 0, 8, 1, 0, 0, 0, 4, 9, 0, 3, 7});

Tensor decode(const std::string& s, IdxOptions opts = {}) { return decode_idx(u8(s), s.size(), "t.idx", opts); }

}  // namespace

TEST_CASE("IDX files read back with their shape, as int64 or scaled floats, plain or gzip") {
  const Tensor labels = decode(kLabels);
  CHECK(labels.dtype() == kInt64);
  CHECK(labels.sizes() == Shape{4});
  CHECK(labels.to_vector<int64_t>() == std::vector<int64_t>{9, 0, 3, 7});

  const Tensor images = decode(kImages, {.dtype = kFloat32, .normalize = true});
  CHECK(images.sizes() == Shape{1, 2, 3});
  const auto px = images.to_vector<float>();
  CHECK(px[0] == 0.0f);
  CHECK(px[3] == doctest::Approx(127.0 / 255.0));
  CHECK(px[5] == 1.0f);
  CHECK(decode(kImages, {.dtype = kFloat64}).to_vector<double>()[4] == 254.0);

  // The same bytes gzip'd, and read from files: gzip is recognised by content, not by name.
  mt::test::TempDir dir;
  write_file(dir.file("labels-idx1-ubyte"), kLabels);
  write_file(dir.file("images.gz"), gzip(kImages));
  CHECK(read_idx(dir.file("labels-idx1-ubyte")).to_vector<int64_t>() == labels.to_vector<int64_t>());
  CHECK(read_idx(dir.file("images.gz"), {.dtype = kFloat32, .normalize = true}).to_vector<float>() == px);
  // gzip(1) concatenates members: split the file in two and compress each part.
  const std::string two = gzip(kImages.substr(0, 10)) + gzip(kImages.substr(10));
  CHECK(decode(two).to_vector<int64_t>() == decode(kImages).to_vector<int64_t>());
  // A zero-length dim is an empty tensor, not an error.
  CHECK(decode(bytes({0, 0, 8, 2, 0, 0, 0, 0, 0, 0, 0, 5})).sizes() == Shape{0, 5});
}

TEST_CASE("malformed IDX files are rejected, each with a telling message") {
  auto rejects = [](const std::string& file, const char* message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(decode(file), doctest::Contains(message), Error);
    CHECK_THROWS_WITH_AS(decode(gzip(file)), doctest::Contains(message), Error);
  };
  rejects("", "shorter than the 4-byte magic");
  rejects(bytes({0x50, 0x4b, 3, 4, 0, 0}), "must start with two zero bytes");
  rejects(bytes({0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0}), "IDX element type float32 (0x0D) is not supported");
  rejects(bytes({0, 0, 0x42, 1}), "IDX element type unknown (0x42)");
  rejects(bytes({0, 0, 8, 0}), "IDX file with 0 dims");
  rejects(bytes({0, 0, 8, 9}), "IDX file with 9 dims");
  rejects(bytes({0, 0, 8, 3, 0, 0, 0, 1, 0, 0}), "truncated IDX header: 3 dims need 16 header bytes, the file has 10");
  rejects(kImages.substr(0, kImages.size() - 1), "truncated IDX file: shape [1, 2, 3] needs 6 bytes of data, the file has 5");
  rejects(kLabels + "xy", "trailing data after the 4 bytes that shape [4] needs");
  CHECK_THROWS_WITH_AS(decode(kLabels + "xy"), doctest::Contains("2 bytes of trailing data"), Error);
  // 2^32-1 in each of 4 dims: more elements than int64 can count.
  rejects(bytes({0, 0, 8, 4, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255}),
          "has more elements than a tensor can index");
  // A huge but representable claim backed by 3 bytes: refused before allocating anything.
  rejects(bytes({0, 0, 8, 2, 0, 1, 0, 0, 0, 1, 0, 0, 1, 2, 3}), "needs 4294967296 bytes of data, the file has 3");

  CHECK_THROWS_WITH_AS(decode(kLabels, {.dtype = kInt64, .normalize = true}),
                       doctest::Contains("normalize needs a floating dtype"), Error);
}

TEST_CASE("broken gzip streams are rejected") {
  const std::string gz = gzip(kLabels);
  CHECK_THROWS_WITH_AS(decode(gz.substr(0, gz.size() - 6)), doctest::Contains("truncated gzip stream"), Error);
  std::string corrupt = gz;
  corrupt[gz.size() - 5] ^= 0x55;  // inside the CRC-32 / length trailer
  CHECK_THROWS_WITH_AS(decode(corrupt), doctest::Contains("corrupt gzip data"), Error);
  CHECK_THROWS_WITH_AS(decode(gz + "junk"), doctest::Contains("4 bytes of trailing data after the gzip stream"), Error);
  // Only the first bytes are a gzip header: zlib's own check fails.
  CHECK_THROWS_WITH_AS(decode(bytes({0x1f, 0x8b, 0, 0, 0})), doctest::Contains("gzip"), Error);
}

TEST_CASE("read_idx names a missing file") {
  CHECK_THROWS_WITH_AS(read_idx("/nonexistent/train-images-idx3-ubyte"),
                       doctest::Contains("/nonexistent/train-images-idx3-ubyte: no such file"), Error);
  mt::test::TempDir dir;
  CHECK_THROWS_WITH_AS(read_idx(dir.file("")), doctest::Contains("not a regular file"), Error);
}

TEST_CASE("load_fashion_mnist finds the split in a directory and checks it") {
  mt::test::TempDir dir;
  // A 2-example stand-in with the real file names (train-* plain, t10k-* gzip'd).
  std::string images = bytes({0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28});
  images += std::string(2 * 28 * 28, '\x80');
  write_file(dir.file("train-images-idx3-ubyte"), images);
  write_file(dir.file("train-labels-idx1-ubyte"), bytes({0, 0, 8, 1, 0, 0, 0, 2, 9, 0}));
  write_file(dir.file("t10k-images-idx3-ubyte.gz"), gzip(images));
  write_file(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(bytes({0, 0, 8, 1, 0, 0, 0, 2, 1, 10})));

  const FashionMnist train = load_fashion_mnist(dir.file(""), Split::Train);
  CHECK(train.images.sizes() == Shape{2, 28, 28});
  CHECK(train.images.dtype() == kFloat32);
  CHECK(train.images.to_vector<float>()[0] == doctest::Approx(128.0 / 255.0));
  CHECK(train.labels.to_vector<int64_t>() == std::vector<int64_t>{9, 0});
  CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.file(""), Split::Test),
                       doctest::Contains("label 10 is not a Fashion-MNIST class"), Error);

  CHECK_THROWS_WITH_AS(load_fashion_mnist("/nonexistent/fmnist"),
                       doctest::Contains("directory /nonexistent/fmnist does not exist; install Debian's "
                                         "dataset-fashion-mnist package (scripts/install-deps.sh does)"),
                       Error);
  std::filesystem::remove(dir.file("train-labels-idx1-ubyte"));
  const std::string missing =
      "train-labels-idx1-ubyte nor " + dir.file("train-labels-idx1-ubyte.gz") + " exists; install Debian's";
  CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.file("")), doctest::Contains(missing.c_str()), Error);
}

TEST_CASE("the real Fashion-MNIST, when Debian's dataset-fashion-mnist is installed") {
  if (!std::filesystem::is_directory(kFashionMnistDir)) {
    MESSAGE("skipped: ", kFashionMnistDir, " is not there (install Debian's dataset-fashion-mnist)");
    return;
  }
  const FashionMnist train = load_fashion_mnist(kFashionMnistDir, Split::Train);
  CHECK(train.images.sizes() == Shape{60000, 28, 28});
  CHECK(train.labels.sizes() == Shape{60000});
  CHECK(raw::max(train.images).item() <= 1.0);
  CHECK(raw::max(train.images).item() > 0.99);  // some pixel is fully white
  // Labels 0..9, and a balanced dataset: 6000 of each class.
  std::vector<int64_t> per_class(10);
  int64_t out_of_range = 0;
  for (int64_t y : train.labels.to_vector<int64_t>()) {
    if (y >= 0 && y <= 9) ++per_class[y];
    else ++out_of_range;
  }
  CHECK(out_of_range == 0);
  CHECK(per_class == std::vector<int64_t>(10, 6000));

  const FashionMnist test = load_fashion_mnist(kFashionMnistDir, Split::Test);
  CHECK(test.images.sizes() == Shape{10000, 28, 28});
  CHECK(test.labels.sizes() == Shape{10000});
}
