// bench_conv: minitrain's side of the convolution benchmark (bench/conv.sh runs it beside
// torch/bench_conv_torch.cpp and conv_torch.py, which time the same workloads), float32, one thread:
//   conv3x3_fwd_ms       y = conv2d(x, w, b), padding 1
//   conv3x3_fwd_bwd_ms   the same plus backward: dx, dw and db (a layer inside a network needs all three)
//                        x: (64, 64, 28, 28)  w: (64, 64, 3, 3)  b: (64)  y: (64, 64, 28, 28)
//   cnn_step_ms          one training step of issue 12's Fashion-MNIST CNN on random data, batch 64:
//                        conv(1->32, 3x3, pad 1) -> BN -> ReLU -> maxpool 2 -> conv(32->64) -> BN ->
//                        ReLU -> maxpool 2 -> flatten -> Linear(3136, 128) -> ReLU -> Linear(128, 10),
//                        cross-entropy, Adam 1e-3 (zero_grad, forward, backward, step)
// `bench_conv cnn` times only the CNN step (bench/steps.sh).
// GFLOP/s of the forward (2·N·O·C·9·H·W = 3.7 GFLOP, counted as a direct convolution) is printed too,
// to compare with bench_core's GEMM rate: this layer runs by Winograd F(2x2, 3x3), which does 2.25x
// fewer multiply-adds, so it can exceed the GEMM's peak (im2col + GEMM stays below it by the copies).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "minitrain.h"

namespace {

constexpr int64_t kN = 64, kC = 64, kO = 64, kH = 28, kW = 28;
constexpr double kForwardFlop = 2.0 * kN * kO * kC * 9 * kH * kW;

void bench_conv() {
  mt::Generator gen(1);
  const mt::Tensor x = mt::randn({kN, kC, kH, kW}, gen).requires_grad_();
  const mt::Tensor w = (mt::randn({kO, kC, 3, 3}, gen) * 0.05).detach().requires_grad_();
  const mt::Tensor b = mt::randn({kO}, gen).requires_grad_();
  const mt::Tensor dy = mt::randn({kN, kO, kH, kW}, gen);
  const mt::Conv2dOptions options{.padding = 1};
  {
    mt::NoGradGuard no_grad;
    mt::Tensor y;
    const bench::Timing t = bench::time_per_call([&] { y = mt::conv2d(x, w, b, options); }, 0.5, 5);
    bench::report("minitrain", "conv3x3_fwd_ms", [](double s) { return s * 1e3; }, t);
    bench::report("minitrain", "conv3x3_fwd_gflops", [](double s) { return kForwardFlop / s * 1e-9; }, t);
  }
  const bench::Timing t = bench::time_per_call(
      [&] {
        for (const mt::Tensor& p : {x, w, b}) p.set_grad(mt::Tensor());
        mt::conv2d(x, w, b, options).backward(dy);
      },
      0.5, 5);
  bench::report("minitrain", "conv3x3_fwd_bwd_ms", [](double s) { return s * 1e3; }, t);
}

void bench_cnn_step() {
  namespace nn = mt::nn;
  mt::manual_seed(2);
  mt::Generator gen(2);
  const mt::Tensor x = mt::randn({64, 1, 28, 28}, gen);  // x: (64, 1, 28, 28)  labels: (64) int64
  std::vector<int64_t> labels(64);
  for (int64_t i = 0; i < 64; ++i) labels[i] = i % 10;
  const mt::Tensor y = mt::from_vector(labels, {64});
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dLayerOptions{.padding = 1}),
                       std::make_shared<nn::BatchNorm2d>(32), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
                       std::make_shared<nn::Conv2d>(32, 64, 3, nn::Conv2dLayerOptions{.padding = 1}),
                       std::make_shared<nn::BatchNorm2d>(64), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
                       std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3136, 128),
                       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)};
  mt::optim::Adam opt(model.parameters(), {.lr = 1e-3});
  nn::CrossEntropyLoss loss_fn;
  const bench::Timing t = bench::time_per_call(
      [&] {
        opt.zero_grad();
        loss_fn(model.forward(x), y).backward();
        opt.step();
      },
      0.5, 5);
  bench::report("minitrain", "cnn_step_ms", [](double s) { return s * 1e3; }, t);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool cnn_only = argc == 2 && std::string(argv[1]) == "cnn";
    if (argc > 2 || (argc == 2 && !cnn_only)) {
      std::fprintf(stderr, "usage: bench_conv [cnn]   (cnn: the CNN step only)\n");
      return 2;
    }
    if (!cnn_only) bench_conv();
    bench_cnn_step();
    bench::report_cpu_share("minitrain");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 1;
  }
}
