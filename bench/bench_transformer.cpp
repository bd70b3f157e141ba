// bench_transformer: the fused transformer ops against their reference compositions
// (autograd/detail/reference_ops.h), forward + backward, float32, one thread, at the GPT preset's sizes
// (batch 32, context 64, dim 128, 4 heads of 32):
//   layer_norm_{fused,composed}_us   x: (32, 64, 128) -> sum(y·w).backward(), grads for x, weight, bias
//   attention_{fused,composed}_us    q, k, v: (32, 4, 64, 32), causal -> sum(y·w).backward()
//   gelu_{fused,composed}_us         x: (32, 64, 512) (the MLP's hidden layer) -> sum(y·w).backward()
// and, per part, the attention kernels alone at one layer's sizes (tensor/cpu/cpu_attention.cpp; no
// autograd, q, k, v the head views of a fused (32, 64, 384) qkv projection, as nn::GPT has them):
//   attention_kernel_{forward,backward}_us   raw::scaled_dot_product_attention and its backward
//   attention_part_{qk,pv,dp,dq,dk,dv}_us    one kind of the kernels' products over the 128 heads,
//                                            cpu::small_gemm on the blocks the kernel uses (Note
//                                            [Causal row blocks]): Q·Kᵀ (Kᵀ's transpose included),
//                                            P·V, dO·Vᵀ (Vᵀ's included), dS·K, dSᵀ·Q, Pᵀ·dO
//   attention_part_products_gflops           the six at the rate of their multiply-adds
// The softmax and the other per-row passes are the kernels' time less their products'.
// bench/torch/bench_torch_transformer.cpp times the same in libtorch. Output: `<impl> <metric>
// <value>` lines on stdout (bench/timing.h), spread on stderr. Before timing, each fused op is
// checked against its composition, so a wrong fast path cannot pass for a fast one.
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include "autograd/detail/reference_ops.h"
#include "bench/timing.h"
#include "minitrain.h"
#include "tensor/cpu/small_gemm.h"
#include "tensor/raw_ops.h"

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

// The attention kernels and their products, one layer of the GPT preset (see the top of the file).
void attention_parts(mt::Generator& gen) {
  const int64_t B = 32, T = 64, C = 128, H = 4, d = C / H, heads = B * H, ld = 3 * C;
  const Tensor qkv = mt::randn({B, T, 3 * C}, gen);
  const auto head_view = [&](int64_t p) { return qkv.narrow(2, p * C, C).view({B, T, H, d}).transpose(1, 2); };
  const Tensor q = head_view(0), k = head_view(1), v = head_view(2), dout = mt::randn({B, H, T, d}, gen);
  const mt::AttentionOptions causal{.causal = true};
  const mt::raw::AttentionResult r = mt::raw::scaled_dot_product_attention(q, k, v, causal);
  bench::report("minitrain", "attention_kernel_forward_us", bench::micros,
                bench::time_per_call([&] { mt::raw::scaled_dot_product_attention(q, k, v, causal); }));
  bench::report("minitrain", "attention_kernel_backward_us", bench::micros, bench::time_per_call([&] {
                  mt::raw::scaled_dot_product_attention_backward(dout, q, k, v, r.out, r.lse,
                                                                 mt::raw::attention_params(q, causal));
                }));
  // The products on plain buffers laid out as the kernel finds them: head h of qkv at row stride
  // 3·C, its (T, T) scores and (T, d) results in scratch. Blocks of 8 rows (keys), as the kernel's.
  constexpr int64_t kBlock = 8;
  std::vector<float> x = mt::randn({B, T, 3 * C}, gen).to_vector<float>();
  std::vector<float> S = (mt::rand({T, T}, gen) * 0.03).to_vector<float>(), out(heads * T * d), t(d * T);
  const auto at = [&](int64_t h, int64_t part) { return x.data() + h / H * T * ld + part * C + h % H * d; };
  using Part = std::function<void(int64_t h)>;
  const auto rows_part = [&](bool transposed_b, int64_t part_a, int64_t part_b) -> Part {
    return [&, transposed_b, part_a, part_b](int64_t h) {  // (rows, d)·(d, keys) or (rows, keys)·(keys, d), by row blocks
      if (transposed_b) mt::cpu::transpose<float>(T, d, at(h, part_b), ld, t.data(), T);
      for (int64_t f = 0; f < T; f += kBlock) {
        const int64_t keys = f + kBlock;
        if (transposed_b) {
          mt::cpu::small_gemm<float>(kBlock, keys, d, at(h, part_a) + f * ld, ld, 1, t.data(), T, S.data() + f * T, T, false);
        } else {
          mt::cpu::small_gemm<float>(kBlock, d, keys, S.data() + f * T, T, 1, at(h, part_b), ld, out.data() + (h * T + f) * d,
                                     d, false);
        }
      }
    };
  };
  const auto keys_part = [&](int64_t part_b) -> Part {  // (keys, rows)·(rows, d) by key blocks: dSᵀ·Q, Pᵀ·dO
    return [&, part_b](int64_t h) {
      for (int64_t f = 0; f < T; f += kBlock)
        mt::cpu::small_gemm<float>(kBlock, d, T - f, S.data() + f * T + f, 1, T, at(h, part_b) + f * ld, ld,
                                   out.data() + (h * T + f) * d, d, false);
    };
  };
  const std::pair<const char*, Part> parts[] = {
      {"attention_part_qk_us", rows_part(true, 0, 1)}, {"attention_part_pv_us", rows_part(false, 0, 2)},
      {"attention_part_dp_us", rows_part(true, 0, 2)}, {"attention_part_dq_us", rows_part(false, 0, 1)},
      {"attention_part_dk_us", keys_part(0)},          {"attention_part_dv_us", keys_part(2)}};
  double total_s = 0, total_cpu_s = 0;
  for (const auto& [metric, part] : parts) {
    const bench::Timing timing = bench::time_per_call([&] {
      for (int64_t h = 0; h < heads; ++h) part(h);
    });
    bench::report("minitrain", metric, bench::micros, timing);
    total_s += timing.median_s;
    total_cpu_s += timing.cpu_median_s;
  }
  double madds = 0;  // per head and kind: Σ over the row blocks of 8·(f + 8)·d
  for (int64_t f = 0; f < T; f += kBlock) madds += static_cast<double>(kBlock * (f + kBlock) * d);
  const double gflop = 6 * 2 * madds * heads * 1e-9;
  std::printf("minitrain attention_part_products_gflops %.4g\nminitrain attention_part_products_gflops:cpu %.4g\n",
              gflop / total_s, gflop / total_cpu_s);
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
    attention_parts(gen);
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
