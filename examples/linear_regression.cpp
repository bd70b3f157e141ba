// The demo the README's first command runs until mini_train arrives: the seed job's math
// (y = x·wᵀ + b, MSE, SGD lr 0.01) written directly against tensors and autograd. It learns a known
// linear map from 1000 noisy samples and prints the loss each epoch and the recovered weights.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "minitrain.h"

int main() {
  try {
    mt::Generator gen(42);
    // Data: y = x·w_trueᵀ + b_true + noise.   x: (1000, 10)  y: (1000, 1)
    const mt::Tensor w_true = mt::randn({1, 10}, gen);
    const mt::Tensor x = mt::randn({1000, 10}, gen);
    const mt::Tensor y = mt::linear(x, w_true, mt::full({1}, 0.5)) + 0.01 * mt::randn({1000, 1}, gen);

    // Parameters, initialised like PyTorch's Linear(10, 1): U(-1/√10, 1/√10).
    mt::Tensor w = (mt::rand({1, 10}, gen) * 2.0 - 1.0) * (1.0 / std::sqrt(10.0));
    mt::Tensor b = (mt::rand({1}, gen) * 2.0 - 1.0) * (1.0 / std::sqrt(10.0));
    w.requires_grad_();
    b.requires_grad_();

    const int64_t batch = 32, epochs = 5;
    const double lr = 0.01;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      double total = 0;
      int64_t steps = 0;
      for (int64_t start = 0; start < x.size(0); start += batch) {
        const int64_t n = std::min(batch, x.size(0) - start);
        const mt::Tensor xb = x.narrow(0, start, n), yb = y.narrow(0, start, n);
        const mt::Tensor loss = (mt::linear(xb, w, b) - yb).pow(2).mean();
        w.set_grad({}), b.set_grad({});
        loss.backward();
        {
          mt::NoGradGuard no_grad;  // the update is not part of the model's history
          w.add_(w.grad(), -lr);
          b.add_(b.grad(), -lr);
        }
        total += loss.item(), ++steps;
      }
      std::printf("Epoch [%lld/%lld], Loss: %.6f\n", static_cast<long long>(epoch),
                  static_cast<long long>(epochs), total / static_cast<double>(steps));
    }
    std::printf("max |w - w_true| = %.4f, b = %.4f (true 0.5)\n", (w - w_true).abs().max().item(), b.item());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mt_demo: error: %s\n", e.what());
    return 1;
  }
}
