// Datasets and the DataLoader: batches have the right shapes and contents, the fast batch path agrees
// with get-and-stack, and worker threads change nothing but speed (Note [Batch order]): the same
// batches in the same order, early exits that do not hang, and errors that reach the loop.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "data/dataloader.h"
#include "tensor/raw_ops.h"

using namespace mt;
using namespace mt::data;

namespace {

// inputs (n, 3): row i = [i, i + 0.25, i + 0.5]; targets (n): i. So a batch names its own indices.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {float(i), float(i) + 0.25f, float(i) + 0.5f});
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(from_vector(x, {n, 3}), from_vector(y, {n}));
}

std::vector<std::vector<int64_t>> batch_targets(const DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Batch& b : loader) out.push_back(b.target.to_vector<int64_t>());
  return out;
}

// A dataset with only get(): batches go through Dataset's default get_batch (get + collate).
// Building batch 'fail_at' throws; every get is counted.
class SlowDataset final : public Dataset {
 public:
  explicit SlowDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    ++gets;
    MT_CHECK(i != fail_at_, "example ", i, " is corrupt");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return {full({2}, double(i)), scalar_tensor(double(i), {.dtype = kInt64})};
  }
  mutable std::atomic<int64_t> gets{0};

 private:
  int64_t n_, fail_at_;
};

}  // namespace

TEST_CASE("TensorDataset serves examples as views and batches with one gather") {
  auto data = numbered(5);
  CHECK(data->size() == 5);
  const Example e = data->get(3);
  CHECK(e.input.sizes() == Shape{3});
  CHECK(e.input.to_vector<float>() == std::vector<float>{3, 3.25f, 3.5f});
  CHECK(e.target.dim() == 0);
  CHECK(e.target.item<int64_t>() == 3);
  CHECK(e.input.storage() == data->inputs().storage());  // a view, not a copy

  // The fast path (index_select) and the obviously correct one (get each, stack) agree.
  const std::vector<int64_t> idx = {4, 0, 4, 2};
  const Batch fast = data->get_batch(idx);
  std::vector<Example> examples;
  for (int64_t i : idx) examples.push_back(data->get(i));
  const Batch slow = collate(examples);
  CHECK(fast.input.sizes() == Shape{4, 3});
  CHECK(fast.target.sizes() == Shape{4});
  CHECK(fast.input.to_vector<float>() == slow.input.to_vector<float>());
  CHECK(fast.target.to_vector<int64_t>() == std::vector<int64_t>{4, 0, 4, 2});

  CHECK_THROWS_WITH_AS(data->get(5), doctest::Contains("index 5 is out of range for a dataset of 5"), Error);
  CHECK_THROWS_WITH_AS(data->get_batch(std::vector<int64_t>{1, -1}), doctest::Contains("index -1 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(TensorDataset(zeros({4, 2}), zeros({3})),
                       doctest::Contains("inputs have 4 examples (shape [4, 2]) but targets have 3"), Error);
}

TEST_CASE("collate refuses examples of different shapes, naming the first odd one") {
  std::vector<Example> examples = {{zeros({2}), zeros({})}, {zeros({2}), zeros({})}, {zeros({3}), zeros({})}};
  CHECK_THROWS_WITH_AS(collate(examples), doctest::Contains("example 2's input is [3] float32 but example 0's is [2]"),
                       Error);
}

TEST_CASE("DataLoader batches: shapes, the short last batch, drop_last") {
  auto data = numbered(10);
  DataLoader loader(data, {.batch_size = 4});
  CHECK(loader.size() == 3);
  std::vector<int64_t> sizes;
  for (const Batch& b : loader) {
    CHECK(b.input.dim() == 2);
    CHECK(b.input.size(1) == 3);
    CHECK(b.input.is_contiguous());
    CHECK(b.target.size(0) == b.size());
    sizes.push_back(b.size());
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK(batch_targets(loader) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});

  DataLoader dropping(data, {.batch_size = 4, .drop_last = true});
  CHECK(dropping.size() == 2);
  CHECK(batch_targets(dropping) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});

  DataLoader empty_loader(numbered(0), {.batch_size = 4, .num_workers = 2});
  CHECK(empty_loader.size() == 0);
  CHECK(empty_loader.begin() == empty_loader.end());
}

TEST_CASE("DataLoader gives the same batches in the same order for 0, 1 and 3 workers") {
  auto data = numbered(103);
  std::vector<std::vector<std::vector<int64_t>>> runs;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(data, {.batch_size = 8, .shuffle = true, .num_workers = workers, .prefetch = 2, .seed = 11});
    std::vector<std::vector<int64_t>> epochs;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      for (const auto& b : batch_targets(loader)) epochs.push_back(b);
    }
    runs.push_back(epochs);
  }
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
  // Shuffled, a new order each epoch, and each epoch visits every example once.
  CHECK(runs[0].size() == 2 * 13);
  CHECK(runs[0][0] != std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(runs[0][0] != runs[0][13]);
  std::set<int64_t> seen;
  for (int k = 0; k < 13; ++k) seen.insert(runs[0][k].begin(), runs[0][k].end());
  CHECK(seen.size() == 103);
}

TEST_CASE("TensorDataset's batches copy rows of every width: short rows word by word, long ones by memcpy") {
  // Rows of 4 to 64 bytes take gather_rows' fixed-size copies, longer ones a memcpy each: 1, 16,
  // 17 and (2, 3) features are 4, 64, 68 and 24 bytes in float32, 8, 128, 136 and 48 in float64.
  for (const Shape& example : {Shape{1}, Shape{16}, Shape{17}, Shape{2, 3}}) {
    for (DType dtype : {kFloat32, kFloat64}) {
      CAPTURE(example);
      CAPTURE(dtype);
      Shape shape = example;
      shape.insert(0, 7);
      Generator gen(3);
      const Tensor x = randn(shape, gen, {.dtype = dtype}), y = randn({7, 2}, gen);
      const TensorDataset data(x, y);
      const std::vector<int64_t> idx = {6, 0, 6, 3, 1};
      const Batch fast = data.get_batch(idx);
      std::vector<Example> examples;
      for (int64_t i : idx) examples.push_back(data.get(i));
      const Batch slow = collate(examples);
      CHECK(fast.input.sizes() == slow.input.sizes());
      CHECK(fast.input.to_vector<double>() == slow.input.to_vector<double>());
      CHECK(fast.target.to_vector<double>() == slow.target.to_vector<double>());
    }
  }
}

TEST_CASE("DataLoader with the default get_batch and workers matches the inline loader") {
  auto data = std::make_shared<SlowDataset>(30);
  DataLoader inline_loader(data, {.batch_size = 4});
  DataLoader threaded(data, {.batch_size = 4, .num_workers = 3});
  std::vector<std::vector<float>> a, b;
  for (const Batch& batch : inline_loader) a.push_back(batch.input.to_vector<float>());
  for (const Batch& batch : threaded) b.push_back(batch.input.to_vector<float>());
  CHECK(a == b);
  CHECK(a.back() == std::vector<float>{28, 28, 29, 29});
}

TEST_CASE("breaking out of a DataLoader loop stops the workers, within the prefetch window") {
  auto data = std::make_shared<SlowDataset>(4000);
  DataLoader loader(data, {.batch_size = 4, .num_workers = 3, .prefetch = 2});
  int64_t taken = 0;
  for (const Batch& b : loader) {
    (void)b;
    if (++taken == 2) break;  // the iterator's destructor joins the workers here
  }
  // At most the two taken, the prefetch window (2 per worker) and one in progress per worker were
  // built: nowhere near the 1000 batches of the epoch.
  CHECK(data->gets.load() <= (2 + 2 * 3 + 3) * 4);
  CHECK(taken == 2);
}

TEST_CASE("a worker's exception reaches the loop, after the batches before it") {
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    auto data = std::make_shared<SlowDataset>(40, /*fail_at=*/21);  // in batch 5 (indices 20..23)
    DataLoader loader(data, {.batch_size = 4, .num_workers = workers});
    int64_t delivered = 0;
    auto run = [&] {
      for (const Batch& b : loader) {
        CHECK(b.target.to_vector<int64_t>().front() == 4 * delivered);
        ++delivered;
      }
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("example 21 is corrupt"), Error);
    CHECK(delivered == 5);

    // Iterating by hand past the error: the failed epoch simply ends (no hang waiting for batches
    // that no worker will build).
    auto it = loader.begin();
    for (int k = 1; k <= 4; ++k) ++it;  // at batch 4, the last good one
    CHECK_THROWS_AS(++it, Error);
    CHECK(it == loader.end());
  }
}

TEST_CASE("DataLoader with a DistributedSampler: each rank loads its share") {
  auto data = numbered(10);
  std::set<int64_t> covered;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(10, 3, rank, DistributedSamplerOptions{.seed = 1});
    DataLoader loader(data, sampler, {.batch_size = 3, .num_workers = 1});
    CHECK(loader.size() == 2);  // 4 samples per rank (padded) in batches of 3: every rank takes 2 steps
    for (const auto& b : batch_targets(loader)) covered.insert(b.begin(), b.end());
  }
  CHECK(covered.size() == 10);
  CHECK_THROWS_WITH_AS(DataLoader(data, std::make_shared<SequentialSampler>(10), {.shuffle = true}),
                       doctest::Contains("shuffle = true cannot be combined with an explicit sampler"), Error);
  CHECK_THROWS_WITH_AS(DataLoader(data, {.batch_size = 0}), doctest::Contains("batch_size must be >= 1"), Error);
}

TEST_CASE("pin_memory with a CPU device changes nothing: the same pageable batches, on the CPU") {
  auto data = numbered(10);
  DataLoader plain(data, {.batch_size = 4, .shuffle = true, .seed = 2});
  DataLoader pinned(data, {.batch_size = 4, .shuffle = true, .seed = 2, .pin_memory = true});
  CHECK(batch_targets(pinned) == batch_targets(plain));
  for (const Batch& b : pinned) CHECK(b.input.device() == kCPU);
  CHECK_THROWS_WITH_AS(DataLoader(data, {.pin_memory = true, .pinned_buffers = 0}),
                       doctest::Contains("pinned_buffers must be >= 1, got 0"), Error);
}

TEST_CASE("DataLoader::begin_at(k) yields the epoch's batches from k on, the same for 0 and 3 workers") {
  // What a mid-epoch resume sees (Note [Mid-epoch resume]): batches k.. of the very same epoch order.
  auto data = numbered(103);  // 13 batches of 8, the last of 7
  for (int workers : {0, 3}) {
    CAPTURE(workers);
    DataLoader loader(data, {.batch_size = 8, .shuffle = true, .num_workers = workers, .seed = 5});
    loader.set_epoch(2);
    const auto whole = batch_targets(loader);
    std::vector<std::vector<int64_t>> rest;
    for (auto it = loader.begin_at(5); it != loader.end(); ++it) rest.push_back(it->target.to_vector<int64_t>());
    REQUIRE(rest.size() == 8);
    CHECK(rest == std::vector<std::vector<int64_t>>(whole.begin() + 5, whole.end()));
    CHECK(loader.begin_at(13) == loader.end());  // the epoch's end: nothing left
  }
  DataLoader loader(data, {.batch_size = 8});
  CHECK_THROWS_WITH_AS(loader.begin_at(14), doctest::Contains("batch 14 is outside the epoch's 0..13 batches"),
                       Error);
}
