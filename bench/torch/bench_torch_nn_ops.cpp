// bench_torch_nn_ops: the libtorch side of bench/bench_nn_ops.cpp: the same ops at the same shapes,
// float32, forward + sum(y·w).backward(), timed by bench/timing.h, printing `libtorch <metric> <value>`
// lines. masked_attention is matmul, masked_fill(-inf), softmax, matmul: libtorch 1.13 has no public
// fused scaled_dot_product_attention (PyTorch 2.0 added it), and its nn::MultiheadAttention composes
// the same. Single-threaded: at::set_num_threads(1); OPENBLAS_NUM_THREADS=1 in the environment.
// Built by bench/torch/CMakeLists.txt, not by minitrain's build.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>

#include "../timing.h"

namespace {

using Inputs = std::vector<torch::Tensor>;
namespace F = torch::nn::functional;

void time_step(const char* metric, const std::function<torch::Tensor(const Inputs&)>& f, const Inputs& in) {
  const torch::Tensor w = torch::randn(f(in).sizes());
  bench::report("libtorch", metric, bench::micros, bench::time_per_call([&] {
                  for (const torch::Tensor& x : in) x.mutable_grad() = torch::Tensor();
                  (f(in) * w).sum().backward();
                }));
}

torch::Tensor leaf(at::IntArrayRef shape) { return torch::randn(shape, torch::requires_grad()); }

}  // namespace

int main() {
  try {
    at::set_num_threads(1);
    torch::manual_seed(1);
    time_step("conv1d_us", [](const Inputs& v) { return torch::conv1d(v[0], v[1], v[2], 1, 2); },
              {leaf({32, 64, 256}), leaf({64, 64, 5}), leaf({64})});
    time_step("conv_transpose2d_us", [](const Inputs& v) { return torch::conv_transpose2d(v[0], v[1], v[2], 2, 1); },
              {leaf({16, 32, 16, 16}), leaf({32, 16, 4, 4}), leaf({16})});
    time_step("pad_reflect_us",
              [](const Inputs& v) { return F::pad(v[0], F::PadFuncOptions({2, 2, 2, 2}).mode(torch::kReflect)); },
              {leaf({16, 32, 32, 32})});
    time_step("interpolate_nearest_us", [](const Inputs& v) {
      return F::interpolate(v[0], F::InterpolateFuncOptions().scale_factor(std::vector<double>{2, 2}));
    }, {leaf({16, 32, 32, 32})});
    time_step("interpolate_bilinear_us", [](const Inputs& v) {
      return F::interpolate(v[0], F::InterpolateFuncOptions()
                                      .scale_factor(std::vector<double>{2, 2})
                                      .mode(torch::kBilinear)
                                      .align_corners(false));
    }, {leaf({16, 32, 32, 32})});
    time_step("adaptive_max_pool2d_us", [](const Inputs& v) { return std::get<0>(torch::adaptive_max_pool2d(v[0], {7, 7})); },
              {leaf({16, 32, 28, 28})});
    time_step("group_norm_us", [](const Inputs& v) { return torch::group_norm(v[0], 8, v[1], v[2]); },
              {leaf({16, 64, 28, 28}), leaf({64}), leaf({64})});
    time_step("silu_us", [](const Inputs& v) { return torch::silu(v[0]); }, {leaf({64, 4096})});
    time_step("mish_us", [](const Inputs& v) { return torch::mish(v[0]); }, {leaf({64, 4096})});
    torch::Tensor target = torch::randint(0, 1000, {512}, torch::kLong);
    target.index_put_({torch::indexing::Slice(0, torch::indexing::None, 10)}, -100);
    time_step("cross_entropy_us", [&](const Inputs& v) {
      return F::cross_entropy(v[0], target, F::CrossEntropyFuncOptions().ignore_index(-100).label_smoothing(0.1));
    }, {leaf({512, 1000})});
    torch::Tensor padded = torch::zeros({32, 1, 1, 64}, torch::kBool);
    for (int64_t b = 0; b < 32; ++b) padded[b].narrow(-1, 64 - b, b).fill_(true);  // row b: b padded keys
    time_step("masked_attention_us", [&](const Inputs& v) {
      const torch::Tensor s = torch::matmul(v[0], v[1].transpose(-1, -2)) / std::sqrt(32.0);
      return torch::matmul(torch::softmax(s.masked_fill(padded, -INFINITY), -1), v[2]);
    }, {leaf({32, 4, 64, 32}), leaf({32, 4, 64, 32}), leaf({32, 4, 64, 32})});
    time_step("logsumexp_us", [](const Inputs& v) { return torch::logsumexp(v[0], {1}); }, {leaf({512, 1000})});
    time_step("cumsum_us", [](const Inputs& v) { return torch::cumsum(v[0], 1); }, {leaf({512, 1000})});
    time_step("topk_us", [](const Inputs& v) { return std::get<0>(torch::topk(v[0], 10, 1)); }, {leaf({512, 1000})});
    time_step("sort_us", [](const Inputs& v) { return std::get<0>(torch::sort(v[0], 1)); }, {leaf({512, 1000})});
    bench::report_cpu_share("libtorch");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch_nn_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
