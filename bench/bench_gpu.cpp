// GPU benchmarks of minitrain's CUDA backend and NCCL group, printed as "key value" lines that
// scripts/gpu-check.sh sets beside bench/gpu_torch.py's (the same keys, measured with PyTorch on the
// same GPU). Built only in CUDA builds; run on cuda:0.
//
//   gemm_fp32_tflops / gemm_tf32_tflops   C = A·B, A, B: (4096, 4096) float32; 2·n³ flops per call
//   gemm_bf16_tflops                      the same in bfloat16: tensor cores, float32 sums (Note
//                                         [16-bit GEMM] in tensor/cuda/cuda_gemm.cu)
//   add_gbps / memcpy_gbps                c = a + b over 64 Mi floats (3 streams of bytes) beside a
//                                         device-to-device cudaMemcpyAsync (2 streams: read, write)
//   attention_ms                          causal attention, B 4, H 12, context 1024, head size 64,
//                                         float32: forward and backward (tensor/cuda/cuda_attention.cu)
//   mlp_step_ms                           4 × Linear(4096, 4096) (ReLU between), batch 4096, MSE, SGD:
//                                         forward, backward, update
//   seed_step_us                          the seed job's step: Linear(10, 1), batch 32, MSE, SGD
//                                         (launch-bound: what it measures is per-op overhead)
//   nccl_small_us / nccl_large_gbps       world-of-one all-reduce of 1 float (latency) and of
//                                         64 Mi floats (bus bandwidth, bytes / time), issue + wait
//
// Timing: warm up, then `reps` timed loops with a device synchronize at each end; the median loop.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <unistd.h>
#include <vector>

#include "autograd/ops.h"
#include "distributed/store/file_store.h"
#include "distributed/process_group/nccl/process_group_nccl.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/sgd.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_gemm.h"
#include "tensor/cuda_info.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

const Device kGpu(DeviceType::CUDA, 0);

Generator& gen() {  // inputs are made on the host, then copied to the GPU
  static Generator g(0);
  return g;
}

// Median seconds per call of fn over `reps` loops of `iters` calls, after `warmup` calls.
double time_per_call(const std::function<void()>& fn, int iters, int reps = 5, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn();
  cuda::synchronize(0);
  std::vector<double> loops;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    cuda::synchronize(0);
    loops.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(loops.begin(), loops.end());
  return loops[loops.size() / 2];
}

void report(const char* key, double value) { std::printf("%s %.4g\n", key, value), std::fflush(stdout); }

void bench_gemm() {
  const int64_t n = 4096;
  const Tensor a = randn({n, n}, gen()).to(kGpu), b = randn({n, n}, gen()).to(kGpu);
  const double flops = 2.0 * n * n * n;
  for (bool tf32 : {false, true}) {
    cuda::set_allow_tf32(tf32);
    const double s = time_per_call([&] { raw::matmul(a, b); }, 20);
    report(tf32 ? "gemm_tf32_tflops" : "gemm_fp32_tflops", flops / s / 1e12);
  }
  cuda::set_allow_tf32(false);
  const Tensor a16 = raw::cast(a, kBFloat16), b16 = raw::cast(b, kBFloat16);
  report("gemm_bf16_tflops", flops / time_per_call([&] { raw::matmul(a16, b16); }, 20) / 1e12);
}

void bench_bandwidth() {
  const int64_t n = int64_t{64} << 20;  // 64 Mi floats, 256 MiB per tensor
  const Tensor a = randn({n}, gen()).to(kGpu), b = randn({n}, gen()).to(kGpu);
  const double bytes = static_cast<double>(n) * 4;
  const double add = time_per_call([&] { raw::binary(BinaryOp::Add, a, b); }, 20);
  report("add_gbps", 3 * bytes / add / 1e9);
  Tensor c = empty({n}, {.device = kGpu});
  const double copy = time_per_call([&] {
    MT_CUDA_CHECK(cudaMemcpyAsync(c.raw_data(), a.raw_data(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                  cuda::current_stream(0)));
  }, 20);
  report("memcpy_gbps", 2 * bytes / copy / 1e9);
}

void bench_attention() {
  const int64_t B = 4, H = 12, T = 1024, d = 64;
  const Tensor q = randn({B, H, T, d}, gen()).to(kGpu), k = randn({B, H, T, d}, gen()).to(kGpu);
  const Tensor v = randn({B, H, T, d}, gen()).to(kGpu), dout = randn({B, H, T, d}, gen()).to(kGpu);
  const AttentionOptions o{.causal = true};
  const AttentionParams p = raw::attention_params(q, o);
  const double s = time_per_call([&] {
    const raw::AttentionResult r = raw::scaled_dot_product_attention(q, k, v, o);
    raw::scaled_dot_product_attention_backward(dout, q, k, v, r.out, r.lse, p);
  }, 10);
  report("attention_ms", 1e3 * s);
}

// One training step: forward, loss, backward, SGD update. x: (B, in)  y: (B, out)
double bench_step(nn::Module& model, const Tensor& x, const Tensor& y, int iters) {
  nn::MSELoss mse;
  optim::SGD opt(model.parameters(), {.lr = 0.01});
  return time_per_call([&] {
    opt.zero_grad();
    mse(model.forward(x), y).backward();
    opt.step();
  }, iters);
}

void bench_training() {
  manual_seed(0);
  auto mlp = std::make_shared<nn::Sequential>();
  for (int l = 0; l < 4; ++l) {
    if (l > 0) mlp->push_back(std::make_shared<nn::ReLU>());
    mlp->push_back(std::make_shared<nn::Linear>(4096, 4096));
  }
  mlp->to(kGpu);
  const Tensor x = randn({4096, 4096}, gen()).to(kGpu), y = randn({4096, 4096}, gen()).to(kGpu);  // (B, 4096)
  report("mlp_step_ms", 1e3 * bench_step(*mlp, x, y, 10));
  auto seed = std::make_shared<nn::Linear>(10, 1);
  seed->to(kGpu);
  const Tensor sx = randn({32, 10}, gen()).to(kGpu), sy = randn({32, 1}, gen()).to(kGpu);
  report("seed_step_us", 1e6 * bench_step(*seed, sx, sy, 2000));
}

void bench_nccl() {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mt_bench_gpu_" + std::to_string(getpid()))).string();
  std::filesystem::remove(path);
  auto store = std::make_shared<dist::FileStore>(dist::FileStoreOptions{.path = path});
  dist::ProcessGroupNCCL pg(store, 0, 1, {.device = 0});
  Tensor small = ones({1}).to(kGpu);
  report("nccl_small_us", 1e6 * time_per_call([&] { pg.allreduce(small)->wait(); }, 1000));
  Tensor large = ones({int64_t{64} << 20}).to(kGpu);
  const double s = time_per_call([&] { pg.allreduce(large)->wait(); }, 20);
  report("nccl_large_gbps", static_cast<double>(large.numel()) * 4 / s / 1e9);
  std::filesystem::remove(path);
}

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA GPU is visible\n");
    return 77;
  }
  std::printf("device %s\n", cuda_device_description(0).c_str());
  bench_gemm();
  bench_bandwidth();
  bench_attention();
  bench_training();
  if (nccl_is_built()) bench_nccl();
  return 0;
}
