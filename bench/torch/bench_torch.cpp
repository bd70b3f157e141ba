// bench_torch: the libtorch C++ side of the minitrain-vs-PyTorch comparison. The same three
// workloads as bench/bench_core.cpp, timed by the same code (bench/timing.h), printing
// `libtorch <metric> <value>` lines for bench/run.sh:
//   tiny_add_us      a + b on two 16-float tensors, no grad
//   gemm1024_gflops  torch::matmul of two 1024×1024 float32 matrices
//   seed_*_us        forward + backward of ((x·wᵀ + b) − y)².mean(), x: (32, 10)  w: (1, 10)
//                    b: (1)  y: (32, 1), with torch::linear and with matmul + add
// Single-threaded: at::set_num_threads(1) here (MT_BENCH_THREADS: another count, bench/threads.sh);
// torch's GEMM is the system OpenBLAS, which reads OPENBLAS_NUM_THREADS=1 (set by run.sh, and by
// hand when running this alone).
// Built by its own CMake project (bench/torch/CMakeLists.txt), not by minitrain's build.
#include <torch/torch.h>

#include <cstdio>
#include <exception>

#include "../timing.h"

namespace {

void bench_tiny_add() {
  const torch::Tensor a = torch::randn({16}), b = torch::randn({16});  // no requires_grad
  torch::Tensor c;
  const bench::Timing t = bench::time_per_call([&] { c = a + b; });
  bench::report("libtorch", "tiny_add_us", bench::micros, t);
}

void bench_gemm() {
  constexpr int64_t kN = 1024;
  constexpr double kGemmFlop = 2.0 * kN * kN * kN;
  const torch::Tensor a = torch::randn({kN, kN}), b = torch::randn({kN, kN});
  torch::Tensor c;  // a fresh result on every call, as in bench_core
  const bench::Timing t = bench::time_per_call([&] { c = torch::matmul(a, b); }, 1.0, 5);
  bench::report("libtorch", "gemm1024_gflops", [](double seconds) { return kGemmFlop / seconds * 1e-9; }, t);
}

void bench_seed() {
  const torch::Tensor x = torch::randn({32, 10});  // x: (B=32, in=10)
  const torch::Tensor y = torch::randn({32, 1});   // y: (B, out=1)
  torch::Tensor w = torch::randn({1, 10}, torch::requires_grad());  // w: (out, in)
  torch::Tensor b = torch::zeros({1}, torch::requires_grad());      // b: (out)

  const auto step = [&](auto&& forward) {
    return [&, forward] {
      w.mutable_grad() = torch::Tensor();  // like `w.grad = None` in Python
      b.mutable_grad() = torch::Tensor();
      const torch::Tensor loss = (forward() - y).pow(2).mean();
      loss.backward();
    };
  };
  const auto with_linear = [&] { return torch::linear(x, w, b); };
  const auto with_matmul = [&] { return torch::matmul(x, w.t()) + b; };

  const bench::Timing tl = bench::time_per_call(step(with_linear));
  bench::report("libtorch", "seed_linear_us", bench::micros, tl);
  const bench::Timing tm = bench::time_per_call(step(with_matmul));
  bench::report("libtorch", "seed_matmul_us", bench::micros, tm);
}

// Whole training steps, as bench_core's d.: zero_grad, forward, loss, backward, SGD update.
void bench_train_steps() {
  torch::manual_seed(4);
  {  // x: (32, 10)  y: (32, 1)
    const torch::Tensor x = torch::randn({32, 10}), y = torch::randn({32, 1});
    torch::nn::Linear model(10, 1);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
    const bench::Timing t = bench::time_per_call([&] {
      opt.zero_grad();
      const torch::Tensor loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      opt.step();
    });
    bench::report("libtorch", "seed_step_us", bench::micros, t);
  }
  {  // x: (128, 784)  labels: (128) int64
    const torch::Tensor x = torch::randn({128, 784});
    const torch::Tensor y = torch::arange(128, torch::kLong).remainder(10);
    torch::nn::Sequential model(torch::nn::Linear(784, 256), torch::nn::ReLU(), torch::nn::Linear(256, 10));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    const bench::Timing t = bench::time_per_call([&] {
      opt.zero_grad();
      const torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
    }, 0.5, 7);
    bench::report("libtorch", "mlp_step_ms", [](double s) { return s * 1e3; }, t);
  }
}

}  // namespace

int main() {
  try {
    at::set_num_threads(bench::torch_threads());  // 1 unless bench/threads.sh says otherwise
    at::set_num_interop_threads(1);
    torch::manual_seed(0);
    std::fprintf(stderr, "# libtorch %s, %d thread(s)\n", TORCH_VERSION, at::get_num_threads());
    bench_tiny_add();
    bench_gemm();
    bench_seed();
    bench_train_steps();
    bench::report_cpu_share("libtorch");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch: %s\n", e.what());
    return 1;
  }
}
