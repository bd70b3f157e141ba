// Results do not depend on the thread count (Note [Fixed chunks], tensor/parallel.h): the same
// computation at 1, 2 and 3 threads gives the same bits, for elementwise ops, reductions, softmax,
// layer norm, convolution and pooling, attention, an optimizer step and a few MLP training steps.
// Each tensor is large enough that its kernels split into several chunks (tensor/cpu/cpu_backend.h's
// grains), and kept small enough that the whole file runs in well under a second.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "minitrain.h"

using namespace mt;

namespace {

// The raw bytes of each tensor (float32), so that == means bitwise equal (-0 vs 0 and NaNs included).
std::vector<std::vector<unsigned char>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<unsigned char>> out;
  for (const Tensor& t : ts) {
    const std::vector<float> v = t.to_vector<float>();
    std::vector<unsigned char> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    out.push_back(std::move(b));
  }
  return out;
}

// Runs `compute` at 1, 2 and 3 threads and checks every result tensor is bitwise the same.
void check_independent(const std::function<std::vector<Tensor>()>& compute) {
  std::vector<std::vector<unsigned char>> one;
  {
    NumThreadsGuard guard(1);
    one = bytes_of(compute());
  }
  for (int threads : {2, 3}) {
    NumThreadsGuard guard(threads);
    const auto got = bytes_of(compute());
    REQUIRE(got.size() == one.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(threads);
      CAPTURE(i);
      CHECK(got[i] == one[i]);
    }
  }
}

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen).requires_grad_();
}

}  // namespace

TEST_CASE("elementwise ops, reductions and softmax give the same bits at 1, 2 and 3 threads") {
  Generator gen(1);
  const Tensor x = randn({300, 1000}, gen), y = randn({300, 1000}, gen), bias = randn({1000}, gen);
  check_independent([&] {
    return std::vector<Tensor>{x + y,          exp(x),          tanh(x) * 3.0,          x + bias,
                               contiguous(transpose(x, 0, 1)), where(gt(x, y), x, y),
                               sum(x),         sum(x, {1}),      sum(x, {0}),            max(x, {1}),
                               mean(x * x),    softmax(x, 1),    log_softmax(x, 1)};
  });
}

TEST_CASE("layer norm, GELU and causal attention, forward and backward, give the same bits at 1, 2 and 3 threads") {
  check_independent([] {
    const Tensor x = leaf({256, 384}, 2), w = leaf({384}, 3), b = leaf({384}, 4), g = leaf({256, 384}, 5);
    const Tensor y = gelu(layer_norm(x, w, b));
    sum(y * g).backward();
    const Tensor q = leaf({2, 4, 64, 32}, 6), k = leaf({2, 4, 64, 32}, 7), v = leaf({2, 4, 64, 32}, 8);
    const Tensor o = scaled_dot_product_attention(q, k, v, {.causal = true});
    sum(o * o).backward();
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad(), o, q.grad(), k.grad(), v.grad()};
  });
}

TEST_CASE("matrix products split into blocks of rows or columns give the same bits at 1, 2 and 3 threads") {
  // Note [GEMM on the pool]: (1100, 300)·(300, 200) splits C's rows into blocks of 512, 512 and 76;
  // (100, 300)·(300, 1100) its columns; the transposed and batched forms take the same blocks. This
  // checks the result, not the mechanism: a split that followed the thread count passed it too when
  // tried (OpenBLAS's single-threaded kernels sum over K in the same order for any block of rows),
  // but that is OpenBLAS's behaviour, not a promise, so the blocks stay fixed by the shape.
  Generator gen(13);
  const Tensor a = randn({1100, 300}, gen), b = randn({300, 200}, gen), c = randn({100, 300}, gen),
               d = randn({300, 1100}, gen), e = randn({2, 1100, 300}, gen);
  check_independent([&] {
    return std::vector<Tensor>{matmul(a, b), matmul(c, d), matmul(transpose(b, 0, 1), transpose(a, 0, 1)),
                               matmul(e, b)};
  });
}

TEST_CASE("convolution and max pooling, forward and backward, give the same bits at 1, 2 and 3 threads") {
  check_independent([] {
    const Tensor x = leaf({8, 8, 28, 28}, 9), w = leaf({16, 8, 3, 3}, 10), b = leaf({16}, 11);
    const Tensor y = max_pool2d(relu(conv2d(x, w, b, {.padding = 1})), {.kernel_size = 2});
    sum(y * y).backward();
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
  });
}

TEST_CASE("Adam and SGD steps and a few MLP training steps give the same bits at 1, 2 and 3 threads") {
  check_independent([] {
    Generator gen(12);
    Tensor a = randn({300, 400}, gen).requires_grad_(), s = randn({300, 400}, gen).requires_grad_();
    optim::Adam adam({a}, {.lr = 1e-2, .weight_decay = 1e-2});
    optim::SGD sgd({s}, {.lr = 1e-2, .momentum = 0.9});
    for (int step = 0; step < 2; ++step) {
      a.set_grad(randn({300, 400}, gen));
      s.set_grad(randn({300, 400}, gen));
      adam.step();
      sgd.step();
    }
    // The MLP: 784-256-10 on one batch of 64, three steps of SGD with momentum.
    manual_seed(13);
    nn::Sequential mlp(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(256, 10));
    const Tensor x = randn({64, 784}, gen);
    const Tensor labels = cast(mul(rand({64}, gen), 10.0), DType::Int64);
    optim::SGD opt(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
    std::vector<Tensor> out = {a, s};
    for (int step = 0; step < 3; ++step) {
      const Tensor loss = nn::functional::cross_entropy(mlp.forward(x), labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      out.push_back(loss.detach());
    }
    for (const Tensor& param : mlp.parameters()) out.push_back(param.detach());
    return out;
  });
}
