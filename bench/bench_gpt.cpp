// bench_gpt: one training step of the GPT preset (nn::GPT: vocab 256, context 64, dim 128, 4 layers,
// 4 heads; batch 32), float32, one thread, with mini_train's recipe: zero_grad, forward, cross-entropy
// over the 32·64 next-byte targets, backward, clip_grad_norm_ to 1.0, AdamW (lr 1e-3, betas
// (0.9, 0.95), weight decay 0.1 on the tensors with >= 2 dims, none on biases and LayerNorm
// parameters). The learning-rate schedule is left out (a scalar per step). bench/torch/bench_torch_gpt.cpp
// and bench/gpt_step_torch.py are the same model and step in libtorch and PyTorch; bench/gpt.sh runs
// the three. Output: `minitrain gpt_step_ms <value>` (bench/timing.h).
// Correctness is the tests' job (tests/nn/test_transformer.cpp checks the model against PyTorch);
// this checks only that the loss falls, so a broken step cannot pass for a fast one.
#include <cstdio>
#include <exception>
#include <vector>

#include "bench/timing.h"
#include "minitrain.h"

int main() {
  try {
    mt::manual_seed(1);
    mt::nn::GPT gpt(mt::nn::GPTOptions{});
    mt::Generator gen(2);
    const mt::Tensor idx = (mt::rand({32, 64}, gen) * 255.99).to(mt::kInt64);
    const mt::Tensor targets = (mt::rand({32, 64}, gen) * 255.99).to(mt::kInt64);
    const std::vector<mt::Tensor> params = gpt.parameters();
    std::vector<mt::Tensor> decay, no_decay;
    for (const mt::Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    mt::optim::AdamW opt(decay, {.lr = 1e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1});
    opt.add_param_group(no_decay, {.lr = 1e-3, .betas = {0.9, 0.95}, .weight_decay = 0.0});
    double first = 0, last = 0;
    const auto step = [&] {
      opt.zero_grad();
      const mt::Tensor loss = mt::nn::F::cross_entropy(gpt(idx).reshape({-1, 256}), targets.reshape({-1}));
      loss.backward();
      mt::optim::clip_grad_norm_(params, 1.0);
      opt.step();
      last = loss.item();
      if (first == 0) first = last;
    };
    const bench::Timing t = bench::time_per_call(step, 1.0, 5);
    MT_CHECK(last < first, "bench_gpt: the loss did not fall (", first, " -> ", last, ")");
    bench::report("minitrain", "gpt_step_ms", [](double s) { return s * 1e3; }, t);
    bench::report_cpu_share("minitrain");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
