// bench_nn_ops: the ops and layers of issue 40, forward + sum(y·w).backward(), float32, one thread,
// beside bench/torch/bench_torch_nn_ops.cpp (libtorch) and bench/nn_ops_torch.py (PyTorch), which
// run the same ops at the same shapes; bench/nn_ops.sh interleaves the three and prints the table
// of bench/README.md. The shapes (every metric is `<op>_us`, microseconds per forward + backward):
//   conv1d                 x (32, 64, 256)  w (64, 64, 5)  padding 2
//   conv_transpose2d       x (16, 32, 16, 16)  w (32, 16, 4, 4)  stride 2, padding 1 -> (16, 16, 32, 32)
//   pad_reflect            x (16, 32, 32, 32)  2 on every side
//   interpolate_nearest    x (16, 32, 32, 32)  scale 2
//   interpolate_bilinear   x (16, 32, 32, 32)  scale 2, align_corners false
//   adaptive_max_pool2d    x (16, 32, 28, 28) -> 7x7
//   group_norm             x (16, 64, 28, 28)  8 groups, affine
//   silu, mish             x (64, 4096)
//   cross_entropy          logits (512, 1000), a tenth of the targets ignored, label smoothing 0.1
//   masked_attention       q, k, v (32, 4, 64, 32), a key padding mask (32, 1, 1, 64)
//   logsumexp, cumsum      x (512, 1000) along dim 1
//   topk                   x (512, 1000), k 10 along dim 1
//   sort                   x (512, 1000) along dim 1
// Output: `minitrain <metric> <value>` lines on stdout (bench/timing.h), the spread on stderr.
#include <cstdio>
#include <exception>
#include <functional>

#include "bench/timing.h"
#include "minitrain.h"
#include "nn/nn.h"

namespace {

using mt::Tensor;
using V = std::vector<Tensor>;

Tensor leaf(const mt::Shape& s, mt::Generator& gen) { return mt::randn(s, gen).requires_grad_(); }

// Times one forward + backward of sum(f(inputs)·w); the gradients are dropped before each call.
void time_step(const char* metric, const std::function<Tensor(const V&)>& f, const V& inputs, mt::Generator& gen) {
  const Tensor w = mt::randn(f(inputs).sizes(), gen);
  bench::report("minitrain", metric, bench::micros, bench::time_per_call([&] {
                  for (const Tensor& t : inputs) t.set_grad(Tensor());
                  (f(inputs) * w).sum().backward();
                }));
}

// Targets in [0, classes), every tenth one ignore_index (-100).
Tensor targets(int64_t n, int64_t classes, mt::Generator& gen) {
  std::vector<int64_t> t = mt::randint(0, classes, {n}, gen).to_vector<int64_t>();
  for (int64_t i = 0; i < n; i += 10) t[i] = -100;
  return mt::from_vector(t, {n});
}

}  // namespace

int main() {
  try {
    using namespace mt;
    namespace F = nn::F;
    Generator gen(1);
    time_step("conv1d_us", [](const V& v) { return conv1d(v[0], v[1], v[2], {.padding = 2}); },
              {leaf({32, 64, 256}, gen), leaf({64, 64, 5}, gen), leaf({64}, gen)}, gen);
    time_step("conv_transpose2d_us",
              [](const V& v) { return conv_transpose2d(v[0], v[1], v[2], {.stride = 2, .padding = 1}); },
              {leaf({16, 32, 16, 16}, gen), leaf({32, 16, 4, 4}, gen), leaf({16}, gen)}, gen);
    time_step("pad_reflect_us", [](const V& v) { return pad(v[0], {2, 2, 2, 2}, {.mode = PadMode::Reflect}); },
              {leaf({16, 32, 32, 32}, gen)}, gen);
    time_step("interpolate_nearest_us", [](const V& v) { return interpolate(v[0], {.scale_factor = 2}); },
              {leaf({16, 32, 32, 32}, gen)}, gen);
    time_step("interpolate_bilinear_us",
              [](const V& v) { return interpolate(v[0], {.scale_factor = 2, .mode = InterpolateMode::Bilinear}); },
              {leaf({16, 32, 32, 32}, gen)}, gen);
    time_step("adaptive_max_pool2d_us", [](const V& v) { return adaptive_max_pool2d(v[0], 7); },
              {leaf({16, 32, 28, 28}, gen)}, gen);
    time_step("group_norm_us", [](const V& v) { return F::group_norm(v[0], 8, v[1], v[2]); },
              {leaf({16, 64, 28, 28}, gen), leaf({64}, gen), leaf({64}, gen)}, gen);
    time_step("silu_us", [](const V& v) { return F::silu(v[0]); }, {leaf({64, 4096}, gen)}, gen);
    time_step("mish_us", [](const V& v) { return F::mish(v[0]); }, {leaf({64, 4096}, gen)}, gen);
    const Tensor target = targets(512, 1000, gen);
    time_step("cross_entropy_us",
              [&](const V& v) { return F::cross_entropy(v[0], target, {.label_smoothing = 0.1}); },
              {leaf({512, 1000}, gen)}, gen);
    std::vector<int64_t> keep(32 * 64, 1);
    for (int64_t b = 0; b < 32; ++b)
      for (int64_t t = 64 - b; t < 64; ++t) keep[b * 64 + t] = 0;  // batch row b has b padded keys
    const Tensor mask = from_vector(keep, {32, 1, 1, 64});
    time_step("masked_attention_us", [&](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], mask); },
              {leaf({32, 4, 64, 32}, gen), leaf({32, 4, 64, 32}, gen), leaf({32, 4, 64, 32}, gen)}, gen);
    time_step("logsumexp_us", [](const V& v) { return logsumexp(v[0], {1}); }, {leaf({512, 1000}, gen)}, gen);
    time_step("cumsum_us", [](const V& v) { return cumsum(v[0], 1); }, {leaf({512, 1000}, gen)}, gen);
    time_step("topk_us", [](const V& v) { return std::get<0>(topk(v[0], 10, 1)); }, {leaf({512, 1000}, gen)}, gen);
    time_step("sort_us", [](const V& v) { return std::get<0>(sort(v[0], 1)); }, {leaf({512, 1000}, gen)}, gen);
    bench::report_cpu_share("minitrain");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nn_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
