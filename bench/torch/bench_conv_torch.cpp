// bench_conv_torch: the libtorch C++ side of bench/conv.sh, the workload of bench/bench_conv.cpp,
// timed by the same code (bench/timing.h), printing `libtorch <metric> <value>` lines:
//   conv3x3_fwd_ms, conv3x3_fwd_gflops   y = torch::conv2d(x, w, b, stride 1, padding 1)
//   conv3x3_fwd_bwd_ms                   the same plus y.backward(dy): dx, dw and db
//   cnn_step_ms                          one training step of bench_conv.cpp's CNN (Adam, batch 64)
// `bench_conv_torch cnn` times only the CNN step (bench/steps.sh).
// x: (64, 64, 28, 28)  w: (64, 64, 3, 3)  b: (64), float32, at::set_num_threads(1) (MT_BENCH_THREADS:
// another count). libtorch picks its own CPU convolution (oneDNN in Debian's build); minitrain's is
// im2col + OpenBLAS.
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <string>

#include "../timing.h"

namespace {

constexpr int64_t kN = 64, kC = 64, kO = 64, kH = 28, kW = 28;
constexpr double kForwardFlop = 2.0 * kN * kO * kC * 9 * kH * kW;

void bench_conv() {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({kN, kC, kH, kW}, torch::requires_grad());
  torch::Tensor w = (torch::randn({kO, kC, 3, 3}) * 0.05).requires_grad_();
  torch::Tensor b = torch::randn({kO}, torch::requires_grad());
  const torch::Tensor dy = torch::randn({kN, kO, kH, kW});
  {
    torch::NoGradGuard no_grad;
    torch::Tensor y;
    const bench::Timing t = bench::time_per_call([&] { y = torch::conv2d(x, w, b, 1, 1); }, 0.5, 5);
    bench::report("libtorch", "conv3x3_fwd_ms", [](double s) { return s * 1e3; }, t);
    bench::report("libtorch", "conv3x3_fwd_gflops", [](double s) { return kForwardFlop / s * 1e-9; }, t);
  }
  const bench::Timing t = bench::time_per_call(
      [&] {
        for (torch::Tensor* p : {&x, &w, &b}) p->mutable_grad() = torch::Tensor();
        torch::conv2d(x, w, b, 1, 1).backward(dy);
      },
      0.5, 5);
  bench::report("libtorch", "conv3x3_fwd_bwd_ms", [](double s) { return s * 1e3; }, t);
}

void bench_cnn_step() {
  namespace nn = torch::nn;
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({64, 1, 28, 28});
  const torch::Tensor y = torch::arange(64, torch::kLong).remainder(10);
  nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::BatchNorm2d(64),
                       nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(),
                       nn::Linear(128, 10));
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  const bench::Timing t = bench::time_per_call(
      [&] {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(model->forward(x), y).backward();
        opt.step();
      },
      0.5, 5);
  bench::report("libtorch", "cnn_step_ms", [](double s) { return s * 1e3; }, t);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool cnn_only = argc == 2 && std::string(argv[1]) == "cnn";
    if (argc > 2 || (argc == 2 && !cnn_only)) {
      std::fprintf(stderr, "usage: bench_conv_torch [cnn]   (cnn: the CNN step only)\n");
      return 2;
    }
    at::set_num_threads(bench::torch_threads());  // 1 unless bench/threads.sh says otherwise
    if (!cnn_only) bench_conv();
    bench_cnn_step();
    bench::report_cpu_share("libtorch");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv_torch: %s\n", e.what());
    return 1;
  }
}
