// The optim layer in use: a training loop with gradient clipping and a warm-up + cosine schedule
// recovers the weights of a linear model, with SGD and with AdamW.
#include <doctest/doctest.h>

#include <functional>
#include <memory>

#include "optim_test_util.h"

using namespace mt;
using namespace mt::optim;

namespace {

// y = x·w_trueᵀ + b_true for x: (64, 3); returns the final (w, b) after `epochs` full-batch steps.
std::vector<double> fit(const std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>& make, int epochs) {
  Generator gen(5);
  const Tensor x = randn({64, 3}, gen);                                     // x: (64, 3)
  const Tensor w_true = from_vector(std::vector<float>{2, -1, 0.5f}, {1, 3});
  const Tensor y = linear(x, w_true, full({1}, 0.3));                       // y: (64, 1)
  Tensor w = zeros({1, 3}, {.requires_grad = true});
  Tensor b = zeros({1}, {.requires_grad = true});
  std::unique_ptr<Optimizer> opt = make({w, b});
  LinearLR warmup(*opt, {.start_factor = 0.1, .total_iters = 10});
  CosineAnnealingLR cosine(*opt, {.t_max = epochs - 10});
  SequentialLR sched(*opt, {warmup, cosine}, {10});
  for (int e = 0; e < epochs; ++e) {
    const Tensor loss = (linear(x, w, b) - y).pow(2).mean();
    opt->zero_grad();
    loss.backward();
    clip_grad_norm_({w, b}, 5.0);
    opt->step();
    sched.step();
  }
  std::vector<double> out = w.to_vector<double>();
  out.push_back(b.item());
  return out;
}

}  // namespace

TEST_CASE("a training loop with clipping and warm-up + cosine recovers a linear model") {
  const std::vector<double> truth = {2, -1, 0.5, 0.3};
  SUBCASE("SGD with momentum") {
    const auto got = fit([](std::vector<Tensor> ps) {
      return std::make_unique<SGD>(std::move(ps), SGDOptions{.lr = 0.1, .momentum = 0.9});
    }, 200);
    for (size_t j = 0; j < truth.size(); ++j) CHECK(got[j] == doctest::Approx(truth[j]).epsilon(1e-3));
  }
  SUBCASE("AdamW with a little weight decay") {
    const auto got = fit([](std::vector<Tensor> ps) {
      return std::make_unique<AdamW>(std::move(ps), AdamWOptions{.lr = 0.1, .weight_decay = 1e-4});
    }, 300);
    for (size_t j = 0; j < truth.size(); ++j) CHECK(got[j] == doctest::Approx(truth[j]).epsilon(1e-3));
  }
}
