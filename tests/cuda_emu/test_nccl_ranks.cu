// ProcessGroupNCCL's host logic with two ranks, as two threads on the two emulated GPUs, against
// the emulated NCCL (include/nccl.h): collectives across ranks, the comm stream waiting for the
// compute stream (Note [Comm stream]), Works keeping their tensors alive (Note [Tensors stay
// alive]), the watchdog failing a collective a peer never joins, or one NCCL reports an error for
// (Note [NCCL watchdog]), and the non-blocking communicator's error path (Note [Non-blocking
// communicator]). A GPU shows none of these orderings reliably; the emulator's slow
// kernels make them deterministic.
#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nccl.h>

#include "distributed/ddp/found_inf.h"
#include "distributed/errors.h"
#include "distributed/store/file_store.h"
#include "distributed/process_group/nccl/process_group_nccl.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/raw_ops.h"
#include "tensor/tensor.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

__global__ void busy_kernel(int milliseconds) { std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds)); }

// A store file under the temporary folder, named for this process, removed when the test is done
// with it (FileStore never removes its file: see file_store.h).
struct StoreFile {
  std::string path;
  StoreFile() {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("mt_emu_nccl_" + std::to_string(getpid()) + "_" + std::to_string(n++)))
               .string();
    std::filesystem::remove(path);
  }
  ~StoreFile() { std::filesystem::remove(path); }
  StoreFile(const StoreFile&) = delete;
  StoreFile& operator=(const StoreFile&) = delete;
};

// Runs body(rank) on `world` threads, each with its own group on cuda:rank; rethrows the first error.
template <typename F>
void as_ranks(int world, std::chrono::milliseconds timeout, F body) {
  const StoreFile store_file;
  const std::string& path = store_file.path;
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<FileStore>(FileStoreOptions{.path = path, .timeout = 10s});
        ProcessGroupNCCL pg(store, r, world, {.timeout = timeout, .device = r, .watchdog_interval = 20ms});
        body(pg, r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

}  // namespace

TEST_CASE("NCCL on two emulated GPUs: collectives wait for the compute stream and see every rank's data") {
  std::vector<std::vector<float>> sums(2), gathered(2), broadcast(2);
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    Tensor t = empty({1000}, {.device = gpu});
    // The fill is queued behind a slow kernel: the all-reduce must wait for it (the ready event),
    // or it would read the allocator's fresh NaN bytes.
    {
      cuda::DeviceGuard guard(r);  // a kernel goes to a stream of the current device
      busy_kernel<<<1, 1, 0, cuda::current_stream(r)>>>(150);
    }
    raw::fill_(t, r + 1.0);
    pg.allreduce(t)->wait();
    sums[r] = t.to_vector<float>();
    std::vector<Tensor> outs = {empty({3}, {.device = gpu}), empty({3}, {.device = gpu})};
    pg.allgather(outs, full({3}, 10.0 * (r + 1), {.device = gpu}))->wait();
    gathered[r] = outs[0].to_vector<float>();
    for (float v : outs[1].to_vector<float>()) gathered[r].push_back(v);
    Tensor b = full({4}, r == 1 ? 7.0 : -1.0, {.device = gpu});
    pg.broadcast(b, 1)->wait();
    broadcast[r] = b.to_vector<float>();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(sums[r] == std::vector<float>(1000, 3.0f));
    CHECK(gathered[r] == std::vector<float>{10, 10, 10, 20, 20, 20});
    CHECK(broadcast[r] == std::vector<float>(4, 7.0f));
  }
}

// Issue 35: polling a running collective's done event left "not ready" as the thread's last error,
// and the next kernel launch's check threw "device not ready" (Note [Polling an event]).
TEST_CASE("NCCL on two emulated GPUs: polling a running collective leaves nothing for the next launch check") {
  std::vector<std::vector<float>> after(2);
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    Tensor t = full({100}, 1.0, {.device = gpu});
    {
      cuda::DeviceGuard guard(r);
      busy_kernel<<<1, 1, 0, cuda::current_stream(r)>>>(200);
    }
    auto work = pg.allreduce(t);
    CHECK_FALSE(work->is_completed());  // the done event is polled: "not ready"
    work->wait();                       // and polled until it fires
    CHECK(cudaPeekAtLastError() == cudaSuccess);
    raw::fill_(t, 2.0 * (r + 1));  // a kernel launch, and its check
    after[r] = t.to_vector<float>();
  });
  CHECK(after[0] == std::vector<float>(100, 2.0f));
  CHECK(after[1] == std::vector<float>(100, 4.0f));
}

TEST_CASE("NCCL on two emulated GPUs: reduce_scatter and allgather_into, out of place and in place") {
  std::vector<std::vector<float>> shards(2), whole(2);
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    // Rank r's input: element i is (r + 1)(i + 1); two shards of 3. The sum over ranks is 3(i + 1).
    std::vector<float> values(6);
    for (int i = 0; i < 6; ++i) values[i] = static_cast<float>((r + 1) * (i + 1));
    Tensor input = from_vector(values, {6}).to(gpu);
    Tensor shard = empty({3}, {.device = gpu});
    pg.reduce_scatter(shard, input)->wait();
    shards[r] = shard.to_vector<float>();
    Tensor mine = input.narrow(0, 3 * r, 3);  // in place, as ZeRO's hook does: ncclReduceScatter's own form
    pg.reduce_scatter(mine, input, dist::ReduceOp::Avg)->wait();
    pg.allgather_into(input, mine)->wait();  // in place too
    whole[r] = input.to_vector<float>();
  });
  CHECK(shards[0] == std::vector<float>{3, 6, 9});
  CHECK(shards[1] == std::vector<float>{12, 15, 18});
  for (int r = 0; r < 2; ++r) CHECK(whole[r] == std::vector<float>{1.5, 3, 4.5, 6, 7.5, 9});
}

// mini_train --gpus 0,1 --precision fp16: each rank's GradScaler asks dist::any_rank_found_inf,
// one float all-reduced with Max over NCCL (Note [One found-inf for all ranks]). An inf in rank 1's
// gradient only makes both ranks skip and back off; the next, clean step both take.
TEST_CASE("NCCL on two emulated GPUs: an inf in one rank's gradients skips the GradScaler step on both") {
  std::vector<std::vector<bool>> stepped(2);
  std::vector<std::vector<float>> param(2);
  std::vector<float> scale(2);
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    Tensor p = full({4}, 1.0, {.device = gpu}).requires_grad_();
    optim::SGD opt({p}, {.lr = 0.5});
    optim::GradScaler scaler;
    scaler.set_found_inf_reduction(any_rank_found_inf(std::shared_ptr<ProcessGroup>(std::shared_ptr<void>(), &pg)));
    for (int step = 0; step < 2; ++step) {
      Tensor g = full({4}, 65536.0, {.device = gpu});  // a gradient of 1, scaled by the initial 2^16
      if (step == 0 && r == 1) raw::fill_(raw::narrow(g, 0, 2, 1), std::numeric_limits<float>::infinity());
      p.set_grad(g);
      stepped[r].push_back(scaler.step(opt));
      scaler.update();
    }
    param[r] = raw::to_device(p, kCPU).to_vector<float>();
    scale[r] = scaler.get_scale();
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank ", r);
    CHECK(stepped[r] == std::vector<bool>{false, true});
    CHECK(scale[r] == 32768.0f);
    CHECK(param[r] == std::vector<float>(4, 0.0f));  // 1 - 0.5 · (65536 / 32768): the second step only
  }
}

TEST_CASE("NCCL on two emulated GPUs: a Work keeps its tensor's memory until its collective is done") {
  std::vector<int> reused(2, -1);
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    if (r == 1) std::this_thread::sleep_for(200ms);  // the peer is late: rank 0's collective waits for it
    void* block = nullptr;
    std::shared_ptr<Work> work;
    {
      Tensor t = full({256}, 1.0, {.device = gpu});
      block = t.storage()->data();
      work = pg.allreduce(t);
    }  // the caller's last reference is gone while the collective may still run
    const Tensor other = empty({256}, {.device = gpu});
    reused[r] = other.storage()->data() == block;
    work->wait();
  });
  CHECK(reused[0] == 0);  // rank 0's collective was certainly still waiting for rank 1
}

TEST_CASE("NCCL on two emulated GPUs: the watchdog fails a collective a peer never joins, and NCCL's errors") {
  std::vector<std::string> errors(2);
  as_ranks(2, 300ms, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    Tensor t = full({8}, 1.0, {.device = gpu});
    if (r == 0) {
      try {
        pg.allreduce(t)->wait(5s);  // rank 1 never issues it: the watchdog must end this, not the 5 s
      } catch (const std::exception& e) {
        errors[0] = e.what();
      }
      try {
        pg.allreduce(t)->wait(5s);  // the group is poisoned: later collectives fail at once
      } catch (const std::exception& e) {
        errors[1] = e.what();
      }
    }
  });
  CHECK(errors[0].find("timed out after 300 ms") != std::string::npos);
  CHECK(errors[0].find("aborted") != std::string::npos);
  CHECK(!errors[1].empty());

  // An asynchronous error NCCL reports (a peer that exited) fails the collective in flight.
  std::string async;
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    Tensor t = full({8}, 1.0, {.device = Device(DeviceType::CUDA, r)});
    if (r == 0) {
      mt_emu::nccl_fail_async(0, ncclRemoteError);
      try {
        pg.allreduce(t)->wait(5s);
      } catch (const std::exception& e) {
        async = e.what();
      }
      mt_emu::nccl_fail_async(0, ncclSuccess);
    }
  });
  CHECK(async.find("NCCL reported an asynchronous error on rank 0 of 2") != std::string::npos);
}

TEST_CASE("NCCL on two emulated GPUs: a non-blocking init whose progress cannot be read says so") {
  // Note [Non-blocking communicator]: ncclCommInitRankConfig answers ncclInProgress, and the group
  // polls ncclCommGetAsyncError. When that query itself fails, its error is the one to report, not
  // the ncclInProgress still in hand (which would read "operation in progress" as an error).
  mt_emu::nccl_fail_query(0, ncclSystemError);
  std::exception_ptr error;
  try {
    as_ranks(2, 5s, [](ProcessGroupNCCL&, int) {});
  } catch (...) {
    error = std::current_exception();
  }
  mt_emu::nccl_fail_query(0, ncclSuccess);
  REQUIRE(error);
  const std::string text = message_of(error);
  CHECK(text.find("ProcessGroupNCCL rank 0 of 2") != std::string::npos);
  CHECK(text.find("creating the NCCL communicator failed") != std::string::npos);
  CHECK(text.find("ncclCommGetAsyncError failed with unhandled system error") != std::string::npos);
  CHECK(text.find("in progress") == std::string::npos);
}

TEST_CASE("NCCL on emulated GPUs: a rank that never arrives is named at setup, within the timeout") {
  const StoreFile store_file;
  auto store = std::make_shared<FileStore>(FileStoreOptions{.path = store_file.path, .timeout = 1s});
  std::exception_ptr error;
  try {
    ProcessGroupNCCL pg(store, 0, 2, {.timeout = 500ms, .device = 0});
  } catch (...) {
    error = std::current_exception();
  }
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), TimeoutError);
  CHECK(message_of(error).find("rank 1 of 2 never arrived") != std::string::npos);
}

TEST_CASE("NCCL on two emulated GPUs: a collective larger than the shared slot is refused, naming the limit") {
  // Each rank's data passes through its slot of the shared file
  // (Note [Emulated NCCL across processes]): a collective that does not fit is an error, never a
  // write past the slot.
  setenv("MT_CUDA_EMU_NCCL_SLOT_MB", "1", 1);
  std::vector<std::string> errors(2);
  as_ranks(2, 10s, [&](ProcessGroupNCCL& pg, int r) {
    const Device gpu(DeviceType::CUDA, r);
    Tensor fits = full({1 << 18}, 1.0, {.device = gpu});  // 1 MiB of float32: exactly one slot
    pg.allreduce(fits)->wait();
    CHECK(fits.to_vector<float>()[0] == 2.0f);
    Tensor too_big = full({(1 << 18) + 1}, 1.0, {.device = gpu});
    try {
      pg.allreduce(too_big)->wait();
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  unsetenv("MT_CUDA_EMU_NCCL_SLOT_MB");
  for (const std::string& e : errors) CHECK(e.find("raise MT_CUDA_EMU_NCCL_SLOT_MB") != std::string::npos);
}
