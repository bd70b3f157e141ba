// bench_conv: minitrain's side of the convolution benchmark (bench/conv.sh runs it beside
// torch/bench_conv_torch.cpp and conv_torch.py, which time the same workload):
//   conv3x3_fwd_ms       y = conv2d(x, w, b), padding 1
//   conv3x3_fwd_bwd_ms   the same plus backward: dx, dw and db (a layer inside a network needs all three)
// with x: (64, 64, 28, 28)  w: (64, 64, 3, 3)  b: (64)  y: (64, 64, 28, 28), float32, one thread.
// GFLOP/s of the forward (2·N·O·C·9·H·W = 3.7 GFLOP) is printed too, to compare with bench_core's
// GEMM rate: the gap is what im2col and the layout cost around the GEMM.
#include <cstdio>
#include <exception>

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

}  // namespace

int main() {
  try {
    bench_conv();
    bench::report_cpu_share("minitrain");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 1;
  }
}
