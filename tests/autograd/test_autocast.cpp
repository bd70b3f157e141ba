// Autocast (autograd/autocast.h): which dtype each op runs in under the guard (Note [Autocast op
// lists]), that the casts are graph nodes through which float32 weights get float32 gradients, the
// weight-cast cache (Note [Autocast cast cache]), and how guards nest and meet no_grad. PyTorch's
// values for whole models: tests/nn/test_autocast_torch.cpp.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "minitrain.h"

using namespace mt;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

Tensor param(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen).requires_grad_();
}

// The node that made t's input `slot` (for a linear's weight: slot 1), or null.
const Node* input_node(const Tensor& t, size_t slot) { return t.grad_fn()->next_edges[slot].fn.get(); }

}  // namespace

TEST_CASE("under autocast, linear runs in bfloat16 on float32 weights, which get float32 gradients") {
  Generator gen(1);
  const Tensor x = randn({4, 8}, gen);
  Tensor w = param({6, 8}, 2), b = param({6}, 3);
  Tensor y;
  {
    AutocastGuard guard(kBFloat16);
    y = linear(x, w, b);
  }
  CHECK(y.dtype() == kBFloat16);
  y.to(kFloat32).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);

  // The same graph written out by hand, without autocast: the bits and the gradients agree.
  Tensor w2 = w.detach().requires_grad_(), b2 = b.detach().requires_grad_();
  const Tensor y2 = linear(x.to(kBFloat16), w2.to(kBFloat16), b2.to(kBFloat16));
  y2.to(kFloat32).sum().backward();
  CHECK(values(y) == values(y2));
  CHECK(values(w.grad()) == values(w2.grad()));
  CHECK(values(b.grad()) == values(b2.grad()));
}

TEST_CASE("under autocast, matmul casts both sides, float16 too, and 1-D operands keep their shapes") {
  Generator gen(4);
  const Tensor a = randn({3, 5}, gen), v = randn({5}, gen);
  AutocastGuard guard(kFloat16);
  const Tensor y = matmul(a, v);
  CHECK(y.dtype() == kFloat16);
  CHECK(y.sizes() == Shape{3});
  CHECK(values(y) == values(matmul(a.to(kFloat16), v.to(kFloat16))));
}

TEST_CASE("under autocast, convolutions and attention run in bfloat16, and a conv weight is cast once") {
  Generator gen(12);
  const Tensor x = randn({2, 3, 6, 6}, gen), q = randn({1, 2, 5, 4}, gen);
  Tensor w = param({4, 3, 3, 3}, 13), b = param({4}, 14);
  AutocastGuard guard(kBFloat16);
  const Tensor y = conv2d(x, w, b, {.padding = 1});
  CHECK(y.dtype() == kBFloat16);
  CHECK(values(y) == values(conv2d(x.to(kBFloat16), w.to(kBFloat16), b.to(kBFloat16), {.padding = 1})));
  CHECK(input_node(conv2d(x, w, b), 1) == input_node(y, 1));
  CHECK(conv1d(randn({2, 3, 8}, gen), param({4, 3, 3}, 15)).dtype() == kBFloat16);
  CHECK(conv_transpose2d(x, param({3, 2, 3, 3}, 16)).dtype() == kBFloat16);
  const Tensor a = scaled_dot_product_attention(q, q, q, {.causal = true});
  CHECK(a.dtype() == kBFloat16);
  const Tensor q16 = q.to(kBFloat16);
  CHECK(values(a) == values(scaled_dot_product_attention(q16, q16, q16, {.causal = true})));
}

TEST_CASE("under autocast, softmax, norms, reductions, exp/log/pow and losses run in float32") {
  Generator gen(5);
  const Tensor x16 = randn({4, 6}, gen).to(kBFloat16);
  const Tensor x32 = x16.to(kFloat32);
  const Tensor labels = from_vector(std::vector<int64_t>{0, 5, 2, 3}, {4});
  AutocastGuard guard(kBFloat16);
  auto same = [&](const Tensor& got, const Tensor& want) {
    CHECK(got.dtype() == kFloat32);
    CHECK(values(got) == values(want));
  };
  same(softmax(x16, 1), softmax(x32, 1));
  same(log_softmax(x16, 1), log_softmax(x32, 1));
  same(layer_norm(x16, Tensor(), Tensor()), layer_norm(x32, Tensor(), Tensor()));
  same(batch_norm_train(x16, Tensor(), Tensor(), 1e-5), batch_norm_train(x32, Tensor(), Tensor(), 1e-5));
  same(sum(x16), sum(x32));
  same(mean(x16, {1}), mean(x32, {1}));
  same(var(x16, {0}), var(x32, {0}));
  same(mt::std(x16), mt::std(x32));
  same(logsumexp(x16, {1}), logsumexp(x32, {1}));
  same(cumsum(x16, 1), cumsum(x32, 1));
  same(exp(x16), exp(x32));
  const Tensor positive = abs(x16) + 1.0;
  same(log(positive), log(positive.to(kFloat32)));
  same(pow(x16, 2.0), pow(x32, 2.0));
  same(nn::functional::cross_entropy(x16, labels), nn::functional::cross_entropy(x32, labels));
  same(nn::functional::mse_loss(x16, x16 * 0.5), nn::functional::mse_loss(x32, (x16 * 0.5).to(kFloat32)));
  // Everything else keeps its input's dtype.
  CHECK(relu(x16).dtype() == kBFloat16);
  CHECK(x16.view({24}).dtype() == kBFloat16);
}

TEST_CASE("under autocast, cat promotes mixed inputs to the widest, and add promotes as always") {
  const Tensor a = ones({2, 3}, {.dtype = kBFloat16}), b = ones({1, 3});
  AutocastGuard guard(kBFloat16);
  CHECK(cat({a, b}, 0).dtype() == kFloat32);
  CHECK(cat({a, a}, 0).dtype() == kBFloat16);
  CHECK(stack({a, b.expand({2, 3})}, 0).dtype() == kFloat32);
  CHECK((a + b).dtype() == kFloat32);
}

TEST_CASE("autocast leaves float64 and int64 alone, so a float64 gradcheck still runs under it") {
  const Tensor x = ones({2, 3}, {.dtype = kFloat64}), w = ones({4, 3}, {.dtype = kFloat64});
  AutocastGuard guard(kBFloat16);
  CHECK(linear(x, w).dtype() == kFloat64);
  CHECK(softmax(x, 1).dtype() == kFloat64);
  CHECK(cat({arange(3), arange(2)}).dtype() == kInt64);
}

TEST_CASE("a weight used twice in one autocast region is cast once, and its gradient is the sum of both uses") {
  // The tied embedding and head of a GPT: one parameter read by two low-precision ops.
  Generator gen(6);
  const Tensor x = randn({2, 4}, gen);
  Tensor w = param({4, 4}, 7);
  Tensor y1, y2;
  {
    AutocastGuard guard(kBFloat16);
    y1 = linear(x, w);
    y2 = linear(y1, w);
    CHECK(autocast::cached_casts() == 1);
    CHECK(input_node(y1, 1) == input_node(y2, 1));  // one CastBackward feeds both
  }
  CHECK(autocast::cached_casts() == 0);  // dropped when the guard exits
  y2.to(kFloat32).sum().backward();

  Tensor w2 = w.detach().requires_grad_();
  const Tensor c = w2.to(kBFloat16);
  linear(linear(x.to(kBFloat16), c), c).to(kFloat32).sum().backward();
  CHECK(values(w.grad()) == values(w2.grad()));
}

TEST_CASE("the cast cache lives as long as the outermost guard, and an inner or disabled guard keeps it") {
  const Tensor x = ones({1, 3});
  Tensor w = param({2, 3}, 8);
  AutocastGuard outer(kBFloat16);
  const Tensor y1 = linear(x, w);
  {
    AutocastGuard off(kBFloat16, {.enabled = false});
    CHECK_FALSE(autocast::is_enabled());
    CHECK(linear(x, w).dtype() == kFloat32);
    {
      AutocastGuard again(kBFloat16);
      CHECK(input_node(linear(x, w), 1) == input_node(y1, 1));
    }
    CHECK(autocast::cached_casts() == 1);
  }
  CHECK(autocast::is_enabled());
  CHECK(input_node(linear(x, w), 1) == input_node(y1, 1));
  SUBCASE("a weight changed in place is cast again") {
    {
      NoGradGuard no_grad;
      w.mul_(2.0);
    }
    CHECK(input_node(linear(x, w), 1) != input_node(y1, 1));
  }
  SUBCASE("without the cache every use casts") {
    AutocastGuard uncached(kBFloat16, {.cache_enabled = false});
    CHECK(input_node(linear(x, w), 1) != input_node(y1, 1));
  }
}

TEST_CASE("a weight first cast under no_grad still gets its gradient when the region trains afterwards") {
  // PyTorch 1.13 reuses the history-less cast here and the weight silently gets no gradient
  // (pytorch/pytorch#112583); Note [Autocast cast cache].
  const Tensor x = ones({1, 3});
  Tensor w = param({2, 3}, 9);
  AutocastGuard guard(kBFloat16);
  {
    NoGradGuard no_grad;
    const Tensor evaluated = linear(x, w);
    CHECK_FALSE(evaluated.requires_grad());
  }
  const Tensor y = linear(x, w);
  REQUIRE(y.requires_grad());
  y.to(kFloat32).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK(values(w.grad()) == std::vector<double>{1, 1, 1, 1, 1, 1});
}

TEST_CASE("autocast is per thread, and the guard takes bfloat16 or float16 only") {
  AutocastGuard guard(kBFloat16);
  bool other_thread_enabled = true;
  std::thread([&] { other_thread_enabled = autocast::is_enabled(); }).join();
  CHECK_FALSE(other_thread_enabled);
  CHECK(autocast::dtype() == kBFloat16);
  CHECK_THROWS_WITH_AS(AutocastGuard{kFloat32}, doctest::Contains("bfloat16 or float16, got float32"), Error);
  CHECK(autocast::is_enabled());  // the refused guard changed nothing
}
