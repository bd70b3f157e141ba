// Byte-level text: reading files and directories, the 90/10 split, the windows (input and target
// one byte apart), batches that do not depend on num_workers, sharding across ranks, the default
// corpus, and the error for a text too short to split.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>

#include "data/dataloader.h"
#include "data/detail/file_io.h"
#include "data/text.h"
#include "test_util.h"

using namespace mt;
using namespace mt::data;

namespace {

// Bytes 0, 1, 2, ... (mod 256): a window names where it starts.
std::vector<uint8_t> counting(int64_t n) {
  std::vector<uint8_t> b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i % 256);
  return b;
}

Bytes shared(std::vector<uint8_t> b) { return std::make_shared<const std::vector<uint8_t>>(std::move(b)); }

std::vector<std::vector<int64_t>> epoch(const DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Batch& b : loader) out.push_back(b.input.to_vector<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("TextWindowDataset: example i is the window at i·stride, the target one byte ahead") {
  const TextWindowDataset train(shared(counting(20)), 4);
  CHECK(train.size() == 16);  // starts 0..15: the last window is bytes 15..19
  const Example e = train.get(3);
  CHECK(e.input.sizes() == Shape{4});
  CHECK(e.input.dtype() == kInt64);
  CHECK(e.input.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5, 6});
  CHECK(e.target.to_vector<int64_t>() == std::vector<int64_t>{4, 5, 6, 7});
  const std::vector<int64_t> idx = {15, 0};
  const Batch b = train.get_batch(idx);
  CHECK(b.input.sizes() == Shape{2, 4});
  CHECK(b.input.to_vector<int64_t>() == std::vector<int64_t>{15, 16, 17, 18, 0, 1, 2, 3});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{16, 17, 18, 19, 1, 2, 3, 4});
  // Validation windows do not overlap: starts 0, 4, 8, 12 (bytes 12..16 is the last whole one).
  const TextWindowDataset val(shared(counting(18)), 4, {.stride = 4});
  CHECK(val.size() == 4);
  CHECK(val.get(3).target.to_vector<int64_t>() == std::vector<int64_t>{13, 14, 15, 16});
  CHECK_THROWS_WITH_AS(train.get(16), doctest::Contains("index 16 is out of range for 16 windows"), Error);
}

TEST_CASE("split_text: the first 90 % trains, the last 10 % validates, at least one window each") {
  const TextCorpus c = split_text(counting(1000), {.context = 8});
  CHECK(c.train->size() == 900);
  CHECK(c.validation->size() == 100);
  CHECK((*c.train)[899] == uint8_t(899 % 256));
  CHECK((*c.validation)[0] == uint8_t(900 % 256));
  // Short texts: validation takes one whole window (context + 1 = 9 bytes) from the end.
  const TextCorpus s = split_text(counting(18), {.context = 8});
  CHECK(s.train->size() == 9);
  CHECK(s.validation->size() == 9);
  CHECK_THROWS_WITH_AS(split_text(counting(17), {.context = 8}, "tiny.txt"),
                       doctest::Contains("tiny.txt: 17 bytes is shorter than two windows of context + 1 = 9 bytes"),
                       Error);
}

TEST_CASE("read_text_bytes: a file, or a directory's text files in name order") {
  test::TempDir dir;
  write_file(dir.file("b.txt"), "world");
  write_file(dir.file("a.txt"), "hello ");
  write_file(dir.file("a.txt.dat"), "index bytes");  // strfile's index: skipped
  std::filesystem::create_symlink(dir.file("a.txt"), dir.file("a.u8"));  // a link: skipped
  const std::vector<uint8_t> all = read_text_bytes(dir.file(""));
  CHECK(std::string(all.begin(), all.end()) == "hello world");
  const std::vector<uint8_t> one = read_text_bytes(dir.file("b.txt"));
  CHECK(std::string(one.begin(), one.end()) == "world");
  CHECK_THROWS_WITH_AS(read_text_bytes(dir.file("missing.txt")), doctest::Contains("does not exist"), Error);
  test::TempDir empty;
  CHECK_THROWS_WITH_AS(read_text_bytes(empty.file("")), doctest::Contains("directory without text files"), Error);
  write_file(dir.file("short.txt"), "tiny");
  CHECK_THROWS_WITH_AS(load_text_corpus(dir.file("short.txt"), {.context = 64}),
                       doctest::Contains("4 bytes is shorter than two windows"), Error);
}

TEST_CASE("text windows: the same shuffled batches under any num_workers, split across ranks") {
  auto data = std::make_shared<TextWindowDataset>(shared(counting(200)), 8);  // 192 windows, starts 0..191
  const auto loader = [&](int workers) {
    return DataLoader(data, {.batch_size = 16, .shuffle = true, .num_workers = workers, .seed = 42});
  };
  const auto serial = epoch(loader(0));
  CHECK(serial.size() == 12);
  CHECK(epoch(loader(3)) == serial);
  CHECK(serial != epoch(DataLoader(data, {.batch_size = 16, .shuffle = true, .seed = 43})));
  // Two ranks: disjoint halves of one shuffled epoch, together every window once.
  std::multiset<int64_t> starts;
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoader shard(data, std::make_shared<DistributedSampler>(data->size(), 2, rank, DistributedSamplerOptions{.seed = 7}),
                     {.batch_size = 7});
    for (const Batch& b : shard)
      for (int64_t r = 0; r < b.size(); ++r) starts.insert(b.input.to_vector<int64_t>()[r * 8]);
  }
  CHECK(starts.size() == 192);
  CHECK(std::set<int64_t>(starts.begin(), starts.end()).size() == 192);
}

TEST_CASE("the default corpus: Debian's fortunes, installed by scripts/install-deps.sh") {
  REQUIRE_MESSAGE(std::filesystem::is_directory(kDefaultTextCorpus), kDefaultTextCorpus,
                  " is missing: install Debian's fortunes package (scripts/install-deps.sh)");
  const TextCorpus c = load_text_corpus(kDefaultTextCorpus, {.context = 64});
  CHECK(c.train->size() > 1000000);
  CHECK(c.validation->size() * 9 == doctest::Approx(c.train->size()).epsilon(0.01));
  const TextWindowDataset val(c.validation, 64, {.stride = 64});
  const std::string text(c.validation->begin(), c.validation->begin() + 200);
  CHECK(text.find(' ') != std::string::npos);  // English text, not an index file
}
