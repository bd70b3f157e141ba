// The pinned-memory DataLoader (data/dataloader.h, pin_memory) and the upload pool under it
// (tensor/cuda/cuda_upload.h, Note [Upload pool]): the batches that reach the GPU equal the host
// batches, a pinned buffer is not refilled while its copy is in flight, and the compute stream
// waits for its own batch's copy only. A sleeping kernel on the copy stream holds a copy back on
// purpose; a sleeping kernel is host code, so these cases exist only in the emulated build.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "data/dataloader.h"
#include "minitrain.h"
#include "tensor/cuda/cuda_upload.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

__global__ void sleep_kernel(int milliseconds) { std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds)); }

std::vector<float> filled(float v) { return std::vector<float>(1000, v); }
Tensor host_full(float v) { return from_vector(filled(v), {1000}); }

}  // namespace

TEST_CASE("pin_memory DataLoader: the batches on the GPU equal the host batches, in order, every epoch") {
  const Device gpu = cuda_device(0);
  Generator gen(3);
  const Tensor x = randn({10, 3}, gen);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10});
  auto data = std::make_shared<data::TensorDataset>(x, y);
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    const data::DataLoaderOptions on_host{.batch_size = 4, .shuffle = true, .num_workers = workers, .seed = 5};
    data::DataLoaderOptions pinned = on_host;
    pinned.device = gpu;
    pinned.pin_memory = true;
    data::DataLoader want(data, on_host), got(data, pinned);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      want.set_epoch(epoch);
      got.set_epoch(epoch);
      std::vector<data::Batch> expected;
      for (const data::Batch& b : want) expected.push_back(b);
      size_t k = 0;
      for (const data::Batch& b : got) {
        REQUIRE(k < expected.size());
        CHECK(b.input.device() == gpu);
        CHECK(b.target.device() == gpu);
        CHECK(b.input.to(kCPU).to_vector<float>() == expected[k].input.to_vector<float>());
        CHECK(b.target.to(kCPU).to_vector<int64_t>() == expected[k].target.to_vector<int64_t>());
        ++k;
      }
      CHECK(k == 3);  // 4 + 4 + 2
    }
  }
  // An epoch broken off with a batch still in flight leaves nothing behind that corrupts the next.
  data::DataLoader loader(data, {.batch_size = 4, .device = gpu, .pin_memory = true});
  for (const data::Batch& b : loader) {
    CHECK(b.input.to(kCPU).to_vector<float>() == x.narrow(0, 0, 4).contiguous().to_vector<float>());
    break;
  }
  const Tensor scratch = raw::to_device(host_full(7), gpu);  // may reuse the dropped batch's block
  CHECK(scratch.to_vector<float>() == filled(7));
}

namespace {
// Examples i: input (3) = i, target i; building example `fail_at` throws.
class FailingDataset final : public data::Dataset {
 public:
  FailingDataset(int64_t n, int64_t fail_at) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t i) const override {
    MT_CHECK(i != fail_at_, "example ", i, " is corrupt");
    return {full({3}, static_cast<double>(i)), full(Shape{}, static_cast<double>(i), {.dtype = kInt64})};
  }

 private:
  int64_t n_, fail_at_;
};
}  // namespace

TEST_CASE("pin_memory DataLoader: an error building batch k+1 surfaces when batch k+1 is asked for") {
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    data::DataLoader loader(std::make_shared<FailingDataset>(20, 9),  // in batch 2 (indices 8..11)
                            {.batch_size = 4, .num_workers = workers, .device = cuda_device(0), .pin_memory = true});
    int64_t delivered = 0;
    auto run = [&] {
      for (const data::Batch& b : loader) {
        CHECK(b.target.to(kCPU).to_vector<int64_t>().front() == 4 * delivered);
        ++delivered;
      }
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("example 9 is corrupt"), Error);
    CHECK(delivered == 2);  // batch 1 was handed out although batch 2 had already failed
  }
}

TEST_CASE("upload pool: a pinned buffer is not refilled under its copy, and compute waits for its own copy only") {
  cuda::UploadPool pool(0, 2);
  using Clock = std::chrono::steady_clock;
  auto first = pool.start({host_full(1)});  // buffer 0
  const auto held = Clock::now();
  sleep_kernel<<<1, 1, 0, pool.copy_stream()>>>(600);  // copies queued from now on wait for it
  auto second = pool.start({host_full(2)});            // buffer 1, behind the sleep
  const void* buffer0 = pool.buffer(0);

  // The compute stream waits for the first copy, not for the second.
  const Tensor one = first.finish()[0];
  CHECK(one.to_vector<float>() == filled(1));
  CHECK_FALSE(second.arrived());

  // Buffer 0's copy is done: it is refilled at once, in the same pinned memory.
  auto third = pool.start({host_full(3)});
  CHECK(pool.buffer(0) == buffer0);
  // Buffer 1's copy is still behind the sleep: this start waits for it before writing 4s there.
  auto fourth = pool.start({host_full(4)});
  CHECK(Clock::now() - held >= std::chrono::milliseconds(500));
  CHECK(second.arrived());
  CHECK(second.finish()[0].to_vector<float>() == filled(2));  // not overwritten by the 4s
  CHECK(third.finish()[0].to_vector<float>() == filled(3));
  CHECK(fourth.finish()[0].to_vector<float>() == filled(4));
}
