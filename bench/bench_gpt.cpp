// bench_gpt: one training step of the GPT preset (nn::GPT: vocab 256, context 64, dim 128, 4 layers,
// 4 heads; batch 32), float32, one thread: zero_grad, forward, cross-entropy over the 32·64 next-byte
// targets, backward, AdamW (lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on every parameter: the
// benchmark times the arithmetic, not the recipe's parameter groups). bench/torch/bench_torch_gpt.cpp
// is the same model and step in libtorch. Output: `minitrain gpt_step_ms <value>` (bench/timing.h).
// Correctness is the tests' job (tests/nn/test_transformer.cpp checks the model against PyTorch);
// this checks only that the loss falls, so a broken step cannot pass for a fast one.
#include <cstdio>
#include <exception>

#include "bench/timing.h"
#include "minitrain.h"

int main() {
  try {
    mt::manual_seed(1);
    mt::nn::GPT gpt(mt::nn::GPTOptions{});
    mt::Generator gen(2);
    const mt::Tensor idx = (mt::rand({32, 64}, gen) * 255.99).to(mt::kInt64);
    const mt::Tensor targets = (mt::rand({32, 64}, gen) * 255.99).to(mt::kInt64);
    mt::optim::AdamW opt(gpt.parameters(), {.lr = 1e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1});
    double first = 0, last = 0;
    const auto step = [&] {
      opt.zero_grad();
      const mt::Tensor loss = mt::nn::F::cross_entropy(gpt(idx).reshape({-1, 256}), targets.reshape({-1}));
      loss.backward();
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
