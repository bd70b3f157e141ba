// An MLP written against minitrain's public API, the way a C++ user would: define a Module, make
// data, train with SGD + momentum and cross-entropy, evaluate, and save the weights in safetensors.
//
// The task: 3 classes of points in 2-D, each class a noisy ring of its own radius (not linearly
// separable, so the hidden layers have to earn their keep).
//   build/example_train_mlp [model.safetensors]
#include <cmath>
#include <iostream>
#include <cstdio>
#include <numbers>

#include "minitrain.h"

using namespace mt;

// 2 -> 64 -> 64 -> 3, ReLU between layers.
struct RingNet : nn::Module {
  RingNet() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, 64));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 64));
    out = register_module("out", std::make_shared<nn::Linear>(64, 3));
  }
  // x: (B, 2) -> logits: (B, 3)
  Tensor forward(const Tensor& x) override { return out->forward(fc2->forward(fc1->forward(x).relu()).relu()); }

  std::shared_ptr<nn::Linear> fc1, fc2, out;
};

// n points per class: radius 1, 2 or 3 (+ noise), uniform angle.   x: (3n, 2)  y: (3n) int64
void make_rings(Generator& gen, int64_t n, Tensor& x, Tensor& y) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t cls = 0; cls < 3; ++cls) {
    for (int64_t i = 0; i < n; ++i) {
      const double angle = 2 * std::numbers::pi * gen.next_double();
      const double radius = static_cast<double>(cls + 1) + 0.3 * (gen.next_double() - 0.5);
      xs.push_back(static_cast<float>(radius * std::cos(angle)));
      xs.push_back(static_cast<float>(radius * std::sin(angle)));
      ys.push_back(cls);
    }
  }
  x = from_vector(xs, {3 * n, 2});
  y = from_vector(ys, {3 * n});
}

double accuracy(nn::Module& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  const Tensor predicted = model.forward(x).argmax(1);
  return eq(predicted, y).to(kFloat64).mean().item();
}

int main(int argc, char** argv) {
  try {
    const std::string path = argc > 1 ? argv[1] : "ring_mlp.safetensors";
    manual_seed(0);  // initial weights
    Generator gen(1);
    Tensor x_train, y_train, x_test, y_test;
    make_rings(gen, 1000, x_train, y_train);
    make_rings(gen, 200, x_test, y_test);

    auto model = std::make_shared<RingNet>();
    std::cout << *model << '\n';
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    nn::CrossEntropyLoss loss_fn;

    const int64_t batch = 64, n = x_train.size(0);
    for (int epoch = 1; epoch <= 30; ++epoch) {
      // A fresh permutation each epoch: shuffled batches train faster than sorted ones.
      const Tensor order = from_vector(data::randperm(n, gen), {n});
      const Tensor xs = x_train.index_select(0, order), ys = y_train.index_select(0, order);
      double total = 0;
      for (int64_t start = 0; start < n; start += batch) {
        const int64_t len = std::min(batch, n - start);
        const Tensor loss = loss_fn(model->forward(xs.narrow(0, start, len)), ys.narrow(0, start, len));
        opt.zero_grad();
        loss.backward();
        opt.step();
        total += loss.item() * static_cast<double>(len);
      }
      if (epoch % 10 == 0)
        std::printf("epoch %2d  loss %.4f  test accuracy %.3f\n", epoch, total / static_cast<double>(n),
                    accuracy(*model, x_test, y_test));
    }
    save_safetensors(path, model->state_dict(), {{"model", "RingNet 2-64-64-3"}});
    std::printf("saved %s\n", path.c_str());
    return accuracy(*model, x_test, y_test) > 0.9 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: error: %s\n", e.what());
    return 1;
  }
}
