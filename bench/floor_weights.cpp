// floor_weights: the weights a few fixed trainings end at, written to one safetensors file, so that a
// change meant only to make steps faster (bench/README.md, "The single-thread floor") can be shown
// to leave every bit as it was: run the binary from before and after the change, then `cmp` the two
// files. Not a benchmark and not a test: it prints nothing and times nothing.
//   seed.*  bench_core's seed_step: Linear(10, 1), SGD lr 0.01, MSE, x: (32, 10), 1000 steps
//   mlp.*   bench_core's mlp_step: 784-256-10 with ReLU, SGD lr 0.01 momentum 0.9, cross-entropy,
//           x: (128, 784), 20 steps
//   seq.*   the paths a 2-D model does not take: Linear(10, 6) on a (4, 8, 10) input, then a batched
//           matmul with a (6, 3) weight and mean squared error against a (4, 8, 3) target; Adam
//           lr 0.01, 200 steps
// Everything runs on one thread (set MT_NUM_THREADS=1 for results comparable across machines).
//   floor_weights OUT.safetensors
#include <cstdio>
#include <exception>
#include <string>

#include "minitrain.h"

namespace {

using mt::Tensor;
namespace nn = mt::nn;

template <typename Loss>
void train(nn::Module& model, mt::optim::Optimizer& opt, Loss& loss_fn, const Tensor& x, const Tensor& y, int steps) {
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    const Tensor loss = loss_fn(model.forward(x), y);
    loss.backward();
    opt.step();
  }
}

void add(mt::NamedTensors& out, const std::string& prefix, const nn::Module& model) {
  for (const auto& [name, t] : model.named_parameters()) out.emplace_back(prefix + name, t);
}

// Linear(10, 6) on (B, T, 10), then y = h·v with v: (6, 3): a 3-D linear and a batched matmul.
struct Sequence : nn::Module {
  std::shared_ptr<nn::Linear> proj = register_module("proj", std::make_shared<nn::Linear>(10, 6));
  Tensor v;
  explicit Sequence(mt::Generator& gen) {
    v = register_parameter("v", mt::randn({6, 3}, gen, {.requires_grad = true}));
  }
  Tensor forward(const Tensor& x) override { return mt::matmul(proj->forward(x).relu(), v); }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2) {
      std::fprintf(stderr, "usage: floor_weights OUT.safetensors\n");
      return 2;
    }
    mt::NamedTensors weights;
    mt::Generator gen(4);
    mt::manual_seed(4);
    {  // x: (32, 10)  y: (32, 1)
      const Tensor x = mt::randn({32, 10}, gen), y = mt::randn({32, 1}, gen);
      auto model = std::make_shared<nn::Linear>(10, 1);
      mt::optim::SGD opt(model->parameters(), {.lr = 0.01});
      nn::MSELoss loss_fn;
      train(*model, opt, loss_fn, x, y, 1000);
      add(weights, "seed.", *model);
    }
    {  // x: (128, 784)  labels: (128) int64
      const Tensor x = mt::randn({128, 784}, gen);
      const Tensor y = mt::from_vector(std::vector<int64_t>(128, 0), {128});
      for (int64_t i = 0; i < 128; ++i) y.data_ptr<int64_t>()[i] = i % 10;
      auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                                                    std::make_shared<nn::Linear>(256, 10));
      mt::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
      nn::CrossEntropyLoss loss_fn;
      train(*model, opt, loss_fn, x, y, 20);
      add(weights, "mlp.", *model);
    }
    {  // x: (4, 8, 10)  y: (4, 8, 3)
      const Tensor x = mt::randn({4, 8, 10}, gen), y = mt::randn({4, 8, 3}, gen);
      auto model = std::make_shared<Sequence>(gen);
      mt::optim::Adam opt(model->parameters(), {.lr = 0.01});
      nn::MSELoss loss_fn;
      train(*model, opt, loss_fn, x, y, 200);
      add(weights, "seq.", *model);
    }
    mt::save_safetensors(argv[1], weights);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "floor_weights: %s\n", e.what());
    return 1;
  }
}
