// bench_transformer: the fused transformer ops against their reference compositions
// (autograd/detail/reference_ops.h), forward + backward, float32, one thread, at the GPT preset's sizes
// (batch 32, context 64, dim 128, 4 heads of 32):
//   layer_norm_{fused,composed}_us   x: (32, 64, 128) -> sum(y·w).backward(), grads for x, weight, bias
//   attention_{fused,composed}_us    q, k, v: (32, 4, 64, 32), causal -> sum(y·w).backward()
//   gelu_{fused,composed}_us         x: (32, 64, 512) (the MLP's hidden layer) -> sum(y·w).backward()
// bench/torch/bench_torch_transformer.cpp times the same in libtorch. Output: `<impl> <metric>
// <value>` lines on stdout (bench/timing.h), spread on stderr. Before timing, each fused op is
// checked against its composition, so a wrong fast path cannot pass for a fast one.
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>

#include "autograd/detail/reference_ops.h"
#include "bench/timing.h"
#include "minitrain.h"

namespace {

using mt::Tensor;
using V = std::vector<Tensor>;

Tensor leaf(const mt::Shape& s, mt::Generator& gen) { return mt::randn(s, gen).requires_grad_(); }

// One forward + backward of sum(f(inputs)·w); the gradients are dropped before the next call.
void step(const std::function<Tensor(const V&)>& f, const V& inputs, const Tensor& w) {
  for (const Tensor& t : inputs) t.set_grad(Tensor());
  (f(inputs) * w).sum().backward();
}

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item(); }

// Times fused and composed, after checking that they agree (values and the first input's gradient).
void compare(const char* name, const std::function<Tensor(const V&)>& fused,
             const std::function<Tensor(const V&)>& composed, const V& inputs, const Tensor& w) {
  step(fused, inputs, w);
  const Tensor y = fused(inputs).detach(), g = inputs[0].grad().clone();
  step(composed, inputs, w);
  const double dy = max_diff(y, composed(inputs).detach()), dg = max_diff(g, inputs[0].grad());
  MT_CHECK(dy < 1e-3 && dg < 1e-3, name, ": fused and composed disagree by ", dy, " (values), ", dg, " (grads)");
  const std::string fused_metric = std::string(name) + "_fused_us", composed_metric = std::string(name) + "_composed_us";
  bench::report("minitrain", fused_metric.c_str(), bench::micros, bench::time_per_call([&] { step(fused, inputs, w); }));
  bench::report("minitrain", composed_metric.c_str(), bench::micros,
                bench::time_per_call([&] { step(composed, inputs, w); }));
}

}  // namespace

int main() {
  try {
    mt::Generator gen(1);
    const int64_t B = 32, T = 64, C = 128, H = 4, d = C / H;
    {
      const V in = {leaf({B, T, C}, gen), leaf({C}, gen), leaf({C}, gen)};
      compare("layer_norm", [](const V& v) { return mt::layer_norm(v[0], v[1], v[2]); },
              [](const V& v) { return mt::reference::layer_norm(v[0], v[1], v[2]); }, in, mt::randn({B, T, C}, gen));
    }
    {
      const V in = {leaf({B, H, T, d}, gen), leaf({B, H, T, d}, gen), leaf({B, H, T, d}, gen)};
      compare("attention", [](const V& v) { return mt::scaled_dot_product_attention(v[0], v[1], v[2], {.causal = true}); },
              [](const V& v) { return mt::reference::scaled_dot_product_attention(v[0], v[1], v[2], {.causal = true}); },
              in, mt::randn({B, H, T, d}, gen));
    }
    {
      const V in = {leaf({B, T, 4 * C}, gen)};
      compare("gelu", [](const V& v) { return mt::gelu(v[0]); }, [](const V& v) { return mt::reference::gelu(v[0]); },
              in, mt::randn({B, T, 4 * C}, gen));
    }
    bench::report_cpu_share("minitrain");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_transformer: %s\n", e.what());
    return 1;
  }
  return 0;
}
