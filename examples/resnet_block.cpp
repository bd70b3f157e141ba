// A small residual network written against minitrain's public API: the ResNet "basic block"
// (He et al. 2016) as a Module whose forward adds its input back, stacked into a classifier and
// trained with Adam. BatchNorm runs on batch statistics while training and on its running
// statistics (buffers) for the test set, after model.eval().
//
// The task: 3 classes of noisy 8x8 one-channel images, a horizontal bar, a vertical bar or a
// diagonal, each at a random place. Orientation is a local pattern, which is what convolutions see.
//   build/example_resnet_block
#include <cstdio>
#include <iostream>

#include "minitrain.h"

using namespace mt;

// conv3x3 -> BN -> ReLU -> conv3x3 -> BN, plus the shortcut, then ReLU:  y = relu(F(x) + shortcut(x)).
// The shortcut is the identity when the shapes agree, else a 1x1 convolution (with BN) that
// matches the channels and the stride.   x: (N, in, H, W)  ->  y: (N, out, H/stride, W/stride)
struct BasicBlock : nn::Module {
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dLayerOptions{
                                                                                 .stride = stride, .padding = 1, .bias = false}));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, 3, nn::Conv2dLayerOptions{.padding = 1, .bias = false}));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      shortcut = register_module("shortcut", std::make_shared<nn::Sequential>(
          std::make_shared<nn::Conv2d>(in, out, 1, nn::Conv2dLayerOptions{.stride = stride, .bias = false}),
          std::make_shared<nn::BatchNorm2d>(out)));
    }
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = bn1->forward(conv1->forward(x)).relu();
    h = bn2->forward(conv2->forward(h));
    return (h + (shortcut ? shortcut->forward(x) : x)).relu();
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> shortcut;  // null: the identity
};

// stem (1 -> 8) -> block(8 -> 8) -> block(8 -> 16, stride 2) -> global average pool -> Linear(16, 3)
struct TinyResNet : nn::Module {
  TinyResNet() {
    stem = register_module("stem", std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dLayerOptions{.padding = 1, .bias = false}),
        std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>()));
    layer1 = register_module("layer1", std::make_shared<BasicBlock>(8, 8, 1));
    layer2 = register_module("layer2", std::make_shared<BasicBlock>(8, 16, 2));
    head = register_module("head", std::make_shared<nn::Sequential>(
        std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16, 3)));
  }
  // x: (N, 1, 8, 8) -> logits: (N, 3)
  Tensor forward(const Tensor& x) override { return head->forward(layer2->forward(layer1->forward(stem->forward(x)))); }

  std::shared_ptr<nn::Sequential> stem, head;
  std::shared_ptr<BasicBlock> layer1, layer2;
};

// n images per class with noise N(0, 0.3²).   x: (3n, 1, 8, 8)  y: (3n) int64
void make_bars(Generator& gen, int64_t n, Tensor& x, Tensor& y) {
  constexpr int64_t kSide = 8;
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 3 * n; ++i) {
    const int64_t cls = i % 3, at = static_cast<int64_t>(gen.next_double() * kSide);
    for (int64_t r = 0; r < kSide; ++r)
      for (int64_t c = 0; c < kSide; ++c) {
        const bool on = cls == 0 ? r == at : cls == 1 ? c == at : (r + c) % kSide == at;
        pixels.push_back(on ? 1.0f : 0.0f);
      }
    labels.push_back(cls);
  }
  x = from_vector(pixels, {3 * n, 1, kSide, kSide}) + randn({3 * n, 1, kSide, kSide}, gen) * 0.3;
  y = from_vector(labels, {3 * n});
}

double accuracy(nn::Module& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  return eq(model.forward(x).argmax(1), y).to(kFloat64).mean().item();
}

int main() {
  try {
    manual_seed(0);
    Generator gen(1);
    Tensor x_train, y_train, x_test, y_test;
    make_bars(gen, 200, x_train, y_train);
    make_bars(gen, 100, x_test, y_test);

    auto model = std::make_shared<TinyResNet>();
    std::cout << *model << '\n';
    optim::Adam opt(model->parameters(), {.lr = 1e-2});
    nn::CrossEntropyLoss loss_fn;
    const int64_t batch = 32, n = x_train.size(0);
    for (int epoch = 1; epoch <= 4; ++epoch) {
      model->train();
      const Tensor order = from_vector(data::randperm(n, gen), {n});
      const Tensor xs = x_train.index_select(0, order), ys = y_train.index_select(0, order);
      double total = 0;
      for (int64_t start = 0; start + batch <= n; start += batch) {
        const Tensor loss = loss_fn(model->forward(xs.narrow(0, start, batch)), ys.narrow(0, start, batch));
        opt.zero_grad();
        loss.backward();
        opt.step();
        total += loss.item();
      }
      model->eval();  // BatchNorm now uses the running statistics it gathered
      std::printf("epoch %d  loss %.4f  test accuracy %.3f\n", epoch, total / static_cast<double>(n / batch),
                  accuracy(*model, x_test, y_test));
    }
    return accuracy(*model, x_test, y_test) >= 0.95 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resnet_block: error: %s\n", e.what());
    return 1;
  }
}
