// bench_torch_transformer: the libtorch side of bench/bench_transformer.cpp: the same three ops at the
// same sizes (batch 32, context 64, dim 128, 4 heads of 32), float32, forward + sum(y·w).backward(),
// timed by bench/timing.h, printing `libtorch <metric> <value>` lines:
//   layer_norm_fused_us   torch::layer_norm (ATen's fused kernel)
//   attention_composed_us matmul, masked_fill(-inf) of the upper triangle, softmax, matmul: libtorch
//                         1.13 has no public fused scaled_dot_product_attention (PyTorch 2.0 added it)
//   gelu_fused_us         torch::gelu (ATen's fused kernel, exact erf)
// Single-threaded: at::set_num_threads(1); OPENBLAS_NUM_THREADS=1 in the environment.
// Built by bench/torch/CMakeLists.txt, not by minitrain's build.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include "../timing.h"

namespace {

using Inputs = std::vector<torch::Tensor>;

void time_step(const char* metric, const std::function<torch::Tensor(const Inputs&)>& f, const Inputs& in,
               const torch::Tensor& w) {
  const bench::Timing t = bench::time_per_call([&] {
    for (const torch::Tensor& x : in) x.mutable_grad() = torch::Tensor();
    (f(in) * w).sum().backward();
  });
  bench::report("libtorch", metric, bench::micros, t);
}

torch::Tensor leaf(at::IntArrayRef shape) { return torch::randn(shape, torch::requires_grad()); }

}  // namespace

int main() {
  try {
    at::set_num_threads(1);
    torch::manual_seed(1);
    const int64_t B = 32, T = 64, C = 128, H = 4, d = C / H;
    time_step("layer_norm_fused_us", [&](const Inputs& v) { return torch::layer_norm(v[0], {C}, v[1], v[2]); },
              {leaf({B, T, C}), leaf({C}), leaf({C})}, torch::randn({B, T, C}));
    const torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
    time_step("attention_composed_us",
              [&](const Inputs& v) {
                const torch::Tensor s = torch::matmul(v[0], v[1].transpose(-1, -2)) / std::sqrt(double(d));
                return torch::matmul(torch::softmax(s.masked_fill(future, -INFINITY), -1), v[2]);
              },
              {leaf({B, H, T, d}), leaf({B, H, T, d}), leaf({B, H, T, d})}, torch::randn({B, H, T, d}));
    time_step("gelu_fused_us", [](const Inputs& v) { return torch::gelu(v[0]); }, {leaf({B, T, 4 * C})},
              torch::randn({B, T, 4 * C}));
    bench::report_cpu_share("libtorch");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch_transformer: %s\n", e.what());
    return 1;
  }
  return 0;
}
