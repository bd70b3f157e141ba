// ProcessGroupNCCL on a real GPU, world of one: every collective against its closed form, CPU tensors
// refused, and DDP on cuda:0 ending with the same weights as plain training on the CPU. Exits 77
// (CTest: skipped) with "SKIPPED: no CUDA GPU" where no GPU is visible; built only in NCCL builds.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/store/file_store.h"
#include "distributed/process_group/nccl/process_group_nccl.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "optim/sgd.h"
#include "tensor/cuda_info.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

const Device kGpu(DeviceType::CUDA, 0);

// A world-of-one NCCL group on cuda:0 that meets through a fresh FileStore.
std::shared_ptr<ProcessGroupNCCL> make_group() {
  static int groups = 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mt_nccl_test_" + std::to_string(getpid()) + "_" + std::to_string(groups++))).string();
  std::filesystem::remove(path);
  auto store = std::make_shared<FileStore>(FileStoreOptions{.path = path, .timeout = 20s});
  return std::make_shared<ProcessGroupNCCL>(store, 0, 1, ProcessGroupNCCLOptions{.timeout = 20s, .device = 0});
}

std::vector<double> host(const Tensor& t) { return t.to(kCPU).to(kFloat64).to_vector<double>(); }

}  // namespace

TEST_CASE("NCCL world of one: allreduce (Sum, Avg, Max), broadcast, allgather and barrier on cuda:0") {
  auto pg = make_group();
  CHECK(pg->backend() == "nccl");
  CHECK(pg->device() == kGpu);
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    Tensor t = from_vector(std::vector<double>{1, -2, 3}, {3}).to(dtype).to(kGpu);
    pg->allreduce(t, ReduceOp::Sum)->wait();  // one rank: the sum is the tensor itself
    CHECK(host(t) == std::vector<double>{1, -2, 3});
    pg->allreduce(t, ReduceOp::Max)->wait();
    CHECK(host(t) == std::vector<double>{1, -2, 3});
    if (dtype != kInt64) {
      pg->allreduce(t, ReduceOp::Avg)->wait();
      CHECK(host(t) == std::vector<double>{1, -2, 3});
    }
    pg->broadcast(t, 0)->wait();
    CHECK(host(t) == std::vector<double>{1, -2, 3});
    std::vector<Tensor> outs;
    pg->allgather(outs, t)->wait();
    REQUIRE(outs.size() == 1);
    CHECK(outs[0].device() == kGpu);
    CHECK(host(outs[0]) == std::vector<double>{1, -2, 3});
  }
  auto work = pg->barrier();
  work->wait();
  CHECK(work->is_completed());
}

TEST_CASE("NCCL: many collectives in flight, then one wait each, in issue order") {
  auto pg = make_group();
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 64; ++i) {
    tensors.push_back(full({1 << 16}, static_cast<double>(i)).to(kGpu));
    works.push_back(pg->allreduce(tensors.back()));
  }
  for (auto& w : works) w->wait();
  for (int i = 0; i < 64; ++i) CHECK(host(tensors[i])[100] == i);
}

TEST_CASE("NCCL refuses CPU tensors and names the device it takes") {
  auto pg = make_group();
  Tensor cpu = ones({4});
  CHECK_THROWS_WITH_AS(pg->allreduce(cpu), doctest::Contains("takes tensors on cuda:0"), Error);
}

TEST_CASE("DDP on cuda:0 (NCCL, world of one) trains exactly like the CPU") {
  // Same initial weights (same seed), same batches: after 5 SGD steps the GPU model under DDP must
  // hold the CPU model's weights, up to float32 rounding of different kernels.
  Generator gen(7);
  const Tensor x = randn({32, 10}, gen), y = randn({32, 1}, gen);
  manual_seed(1);
  auto cpu_model = std::make_shared<nn::Linear>(10, 1);
  manual_seed(1);
  auto gpu_model = std::make_shared<nn::Linear>(10, 1);
  gpu_model->to(kGpu);
  auto ddp = std::make_shared<DistributedDataParallel>(gpu_model, make_group());
  optim::SGD cpu_opt(cpu_model->parameters(), {.lr = 0.1});
  optim::SGD gpu_opt(gpu_model->parameters(), {.lr = 0.1});
  nn::MSELoss mse;
  const Tensor gx = x.to(kGpu), gy = y.to(kGpu);
  for (int step = 0; step < 5; ++step) {
    cpu_opt.zero_grad();
    mse(cpu_model->forward(x), y).backward();
    cpu_opt.step();
    ddp->zero_grad();
    mse(ddp->forward(gx), gy).backward();
    gpu_opt.step();
  }
  const auto a = cpu_model->state_dict(), b = gpu_model->state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> va = host(a[i].second.detach()), vb = host(b[i].second.detach());
    for (size_t j = 0; j < va.size(); ++j) CHECK(vb[j] == doctest::Approx(va[j]).epsilon(1e-5));
  }
}

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA GPU is visible (cuda_device_count() == 0); these tests need one\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
