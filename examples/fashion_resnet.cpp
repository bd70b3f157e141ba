// A small residual network on Fashion-MNIST with the layers a PyTorch user reaches for: GroupNorm
// instead of BatchNorm (no running statistics, so train and eval compute the same thing), SiLU,
// convolutions with padding = nn::kSame (PyTorch's padding="same"), and adaptive pooling, max to halve
// the stem's 28x28 and average for the global pool before the classifier.
//
// It trains for 60 Adam steps of 64 images (the first 3,840 of the training set, seen once) and then
// checks two things, so CI can run it (tests/CMakeLists.txt): the training loss fell (the mean of the
// last 5 steps is at most 0.6 of the first 5's; measured 0.44) and the accuracy on 1,000 test images
// is at least 0.55 (chance: 0.1; measured 0.646).
//   build/example_fashion_resnet [DATA_DIR]    (default: Debian's /usr/share/datasets/fashion-mnist)
// Exit 0: both bars met; 1: not met, or an error; 77: no dataset here (ctest reports a skip).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "data/fashion_mnist.h"
#include "minitrain.h"

using namespace mt;

namespace {

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, nn::Conv2dLayerOptions options) {
  options.bias = false;  // GroupNorm's bias follows
  return std::make_shared<nn::Conv2d>(in, out, 3, options);
}

// conv -> GN -> SiLU -> conv -> GN, plus x, then SiLU:  y = silu(F(x) + x).  x, y: (N, C, H, W)
struct Block : nn::Module {
  explicit Block(int64_t c) {
    conv1 = register_module("conv1", conv3x3(c, c, {.padding = nn::kSame}));
    gn1 = register_module("gn1", std::make_shared<nn::GroupNorm>(4, c));
    conv2 = register_module("conv2", conv3x3(c, c, {.padding = nn::kSame}));
    gn2 = register_module("gn2", std::make_shared<nn::GroupNorm>(4, c));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = nn::F::silu(gn1->forward(conv1->forward(x)));
    return nn::F::silu(gn2->forward(conv2->forward(h)) + x);
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::GroupNorm> gn1, gn2;
};

// (N, 1, 28, 28) -> stem conv (16, 28, 28) -> adaptive max pool (16, 14, 14) -> block -> conv stride 2
// (32, 7, 7) -> block -> adaptive average pool (32, 1, 1) -> Linear -> logits (N, 10)
std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(conv3x3(1, 16, {.padding = nn::kSame}), std::make_shared<nn::GroupNorm>(4, 16),
                        std::make_shared<nn::SiLU>(), std::make_shared<nn::AdaptiveMaxPool2d>(14),
                        std::make_shared<Block>(16), conv3x3(16, 32, {.stride = 2, .padding = 1}),
                        std::make_shared<nn::GroupNorm>(4, 32), std::make_shared<nn::SiLU>(), std::make_shared<Block>(32),
                        std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
                        std::make_shared<nn::Linear>(32, 10));
}

// Images as (N, 1, 28, 28), standardised by the training slice's mean and std.
Tensor as_input(const Tensor& images, double mean, double std) {
  return ((images - mean) / std).view({images.size(0), 1, 28, 28});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : data::kFashionMnistDir;
  if (!std::filesystem::exists(dir)) {
    std::fprintf(stderr, "fashion_resnet: no Fashion-MNIST in %s (Debian: dataset-fashion-mnist): skipped\n", dir.c_str());
    return 77;
  }
  try {
    manual_seed(0);
    Generator gen(1);
    constexpr int64_t kBatch = 64, kSteps = 60, kTest = 1000;
    const data::FashionMnist train = data::load_fashion_mnist(dir, data::Split::Train);
    const data::FashionMnist test = data::load_fashion_mnist(dir, data::Split::Test);
    const Tensor train_images = train.images.narrow(0, 0, kBatch * kSteps);
    const double mean = train_images.mean().item(), sd = mt::std(train_images).item();
    const Tensor x = as_input(train_images, mean, sd), y = train.labels.narrow(0, 0, kBatch * kSteps);
    const Tensor x_test = as_input(test.images.narrow(0, 0, kTest), mean, sd), y_test = test.labels.narrow(0, 0, kTest);

    const std::shared_ptr<nn::Sequential> model = make_model();
    optim::Adam opt(model->parameters(), {.lr = 3e-3});
    std::vector<double> losses;
    for (int64_t step = 0; step < kSteps; ++step) {  // one pass over the slice, one batch a step
      const Tensor loss = nn::F::cross_entropy(model->forward(x.narrow(0, step * kBatch, kBatch)),
                                               y.narrow(0, step * kBatch, kBatch));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
      if (step % 10 == 0 || step == kSteps - 1) std::printf("step %2lld  loss %.4f\n", static_cast<long long>(step), losses.back());
    }
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += losses[i] / 5, last += losses[losses.size() - 1 - i] / 5;
    double accuracy;
    {
      NoGradGuard no_grad;
      model->eval();
      accuracy = eq(model->forward(x_test).argmax(1), y_test).to(kFloat64).mean().item();
    }
    std::printf("loss: first 5 steps %.4f, last 5 %.4f (bar: <= 0.6x); test accuracy %.3f on %lld images (bar: >= 0.55)\n",
                first, last, accuracy, static_cast<long long>(kTest));
    return last <= 0.6 * first && accuracy >= 0.55 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_resnet: error: %s\n", e.what());
    return 1;
  }
}
