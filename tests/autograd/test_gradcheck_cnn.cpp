// The ops convolutional networks are made of, against central finite differences in float64:
// unfold/fold, conv2d over stride/padding/dilation/groups, pooling, cat/stack/split/chunk,
// var/std/min, clamp; non-contiguous inputs included. And the masked backwards: no NaN where an
// infinite gradient meets a zero mask (Note [Masked gradients] in autograd/functions/elementwise.cpp).
#include <doctest/doctest.h>

#include <cmath>

#include "minitrain.h"
#include "gradcheck_case.h"

using namespace mt;

namespace {
Generator gen(77);

Tensor input(const Shape& s, double lo = -1.0, double hi = 1.0) {
  Tensor t = rand(s, gen, {.dtype = kFloat64}) * (hi - lo) + lo;
  return t.requires_grad_();
}

const auto check = &test::check_gradcheck;
using V = const std::vector<Tensor>&;
}  // namespace

TEST_CASE("gradcheck: unfold and fold") {
  const UnfoldOptions plain{.kernel_size = 2};
  const UnfoldOptions all{.kernel_size = {2, 3}, .dilation = {2, 1}, .padding = {1, 2}, .stride = {2, 1}};
  check([&](V x) { return unfold(x[0], plain); }, {input({2, 3, 4, 5})});
  check([&](V x) { return unfold(x[0], all); }, {input({1, 2, 5, 4})});
  // fold's input: (N, C·kh·kw, L) with L the number of blocks unfold makes of a 5x4 image.
  const int64_t blocks = unfold(zeros({1, 1, 5, 4}), all).size(2);
  check([&](V x) { return fold(x[0], {5, 4}, all); }, {input({1, 2 * 6, blocks})});
  check([&](V x) { return fold(x[0], {3, 3}, plain); }, {input({2, 4, 4})});
}

TEST_CASE("gradcheck: conv2d over stride, padding, dilation and groups") {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{2, 3, 5, 5}, {4, 3, 3, 3}, {}},
      {{2, 3, 6, 5}, {2, 3, 3, 2}, {.stride = 2, .padding = 1}},
      {{1, 2, 7, 6}, {3, 2, 3, 3}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = 2}},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, {.padding = 1, .groups = 2}},
      {{1, 4, 4, 4}, {4, 1, 2, 2}, {.stride = 2, .groups = 4}},  // depthwise
      {{2, 3, 4, 4}, {5, 3, 1, 1}, {}},                            // pointwise: no im2col
      {{2, 4, 3, 4}, {2, 2, 1, 1}, {.groups = 2}},
      {{1, 16, 3, 4}, {16, 16, 3, 3}, {.padding = 1}},  // Winograd F(2x2, 3x3) (tensor/raw_winograd.cpp)
      {{2, 16, 4, 3}, {16, 16, 3, 3}, {.padding = {0, 2}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.x);
    CAPTURE(c.w);
    const Tensor b = input({c.w[0]});
    check([&](V p) { return conv2d(p[0], p[1], p[2], c.o); }, {input(c.x), input(c.w), b});
    check([&](V p) { return conv2d(p[0], p[1], Tensor(), c.o); }, {input(c.x), input(c.w)});
  }
}

TEST_CASE("gradcheck: conv2d of non-contiguous input and weight") {
  // x stored as (N, H, W, C) and permuted to NCHW; w transposed in its kernel dims.
  check([](V p) { return conv2d(p[0].permute({0, 3, 1, 2}), p[1].transpose(2, 3), p[2], {.padding = 1}); },
        {input({2, 5, 4, 3}), input({4, 3, 2, 3}), input({4})});
  // A strided slice of a larger batch.
  check([](V p) { return conv2d(p[0].slice(0, 0, 4, 2).slice(3, 1, 6), p[1]); },
        {input({4, 2, 5, 6}), input({3, 2, 2, 2})});
}

TEST_CASE("gradcheck: max and average pooling") {
  check([](V x) { return max_pool2d(x[0], {.kernel_size = 2}); }, {input({2, 3, 4, 6})});
  check([](V x) { return max_pool2d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); }, {input({1, 2, 5, 5})});
  check([](V x) { return max_pool2d(x[0], {.kernel_size = {2, 3}, .stride = 1, .dilation = {2, 1}}); },
        {input({1, 2, 5, 5})});
  check([](V x) { return max_pool2d(x[0].transpose(2, 3), {.kernel_size = 2}); }, {input({1, 2, 6, 4})});
  check([](V x) { return avg_pool2d(x[0], {.kernel_size = 2}); }, {input({2, 3, 4, 6})});
  check([](V x) { return avg_pool2d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); }, {input({1, 2, 5, 5})});
  check([](V x) { return avg_pool2d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = false}); },
        {input({1, 2, 5, 5})});
  check([](V x) { return adaptive_avg_pool2d(x[0], 1); }, {input({2, 3, 4, 5})});
  check([](V x) { return adaptive_avg_pool2d(x[0], {2, 3}); }, {input({1, 2, 5, 7})});
}

TEST_CASE("gradcheck: cat, stack, split, chunk") {
  check([](V x) { return cat({x[0], x[1], x[2]}, 1); }, {input({2, 1, 3}), input({2, 4, 3}), input({2, 2, 3})});
  check([](V x) { return cat({x[0].t(), x[1]}, 0); }, {input({3, 2}), input({1, 3})});
  // A piece that wants no gradient still takes its rows: x's gradient starts after them (SyncBatchNorm
  // joins its statistics after other ranks' zero rows this way).
  const Tensor w = input({6, 3}).detach();  // weights the rows, so a shifted gradient shows
  check([&](V x) { return cat({zeros({2, 3}, {.dtype = kFloat64}), x[0], zeros({1, 3}, {.dtype = kFloat64})}, 0) * w; },
        {input({3, 3})});
  check([](V x) { return stack({x[0], x[1]}, 1); }, {input({2, 3}), input({2, 3})});
  check([](V x) { return stack({x[0], x[1], x[0]}, -1); }, {input({2, 3}), input({2, 3})});
  check([](V x) {
    const auto pieces = split(x[0], 2, 1);  // sizes 2, 2, 1
    return pieces[0] * pieces[1] + pieces[2];
  }, {input({3, 5})});
  check([](V x) { return split(x[0], std::vector<int64_t>{1, 3}, 0)[1]; }, {input({4, 2})});
  check([](V x) {
    const auto pieces = chunk(x[0], 3, 0);  // 7 rows: 3, 3, 1
    return cat({pieces[2], pieces[0]}, 0);
  }, {input({7, 2})});
}

TEST_CASE("cat skips 1-D empty tensors, whatever the others' rank, as PyTorch does") {
  // The legacy rule: a (0) tensor joins anything, e.g. an empty accumulator as the first piece.
  const Tensor none = zeros({0}, {.dtype = kFloat64}).requires_grad_();
  const Tensor b = input({2, 3});
  const Tensor y = cat({none, b, none}, 1);
  REQUIRE(y.sizes() == Shape({2, 3}));
  CHECK(y.to_vector<double>() == b.to_vector<double>());
  (y * 2.0).sum().backward();
  CHECK(none.grad().sizes() == Shape({0}));
  CHECK(b.grad().to_vector<double>() == std::vector<double>(6, 2.0));
  CHECK(cat({none, b}, -2).sizes() == Shape({2, 3}));  // dim is counted in b's rank
  CHECK(cat({none, none}).sizes() == Shape({0}));
  // Only 1-D empties are skipped: a (0, 2) tensor must still match in every dim but dim.
  CHECK_THROWS_WITH_AS(cat({zeros({0, 2}, {.dtype = kFloat64}), b}), doctest::Contains("in every dim but 0"), Error);
}

TEST_CASE("gradcheck: var, std, min, clamp") {
  check([](V x) { return var(x[0]); }, {input({3, 4})});
  check([](V x) { return var(x[0], {0, 2}, {.unbiased = false}); }, {input({3, 2, 4})});
  check([](V x) { return var(x[0], {1}, {.keepdim = true}); }, {input({3, 4})});
  check([](V x) { return mt::std(x[0], {1}); }, {input({3, 4})});
  check([](V x) { return mt::std(x[0].t(), {}, {.unbiased = false}); }, {input({3, 4})});
  check([](V x) { return min(x[0]); }, {input({3, 4})});
  check([](V x) { return min(x[0], {1}); }, {input({3, 4})});
  check([](V x) { return clamp(x[0], -0.5, 0.5); }, {input({4, 5})});
  check([](V x) { return clamp(x[0], std::nullopt, 0.2); }, {input({4, 5})});
  check([](V x) { return clamp(x[0], 0.1, std::nullopt); }, {input({4, 5})});
}

TEST_CASE("var, std and min match their definitions") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 4, 7}, {2, 2});
  CHECK(var(x).item() == doctest::Approx(7.0));                      // mean 3.5, Σ(x-m)² = 21, / 3
  CHECK(var(x, {}, {.unbiased = false}).item() == doctest::Approx(5.25));
  CHECK(mt::std(x).item() == doctest::Approx(std::sqrt(7.0)));
  CHECK(var(x, {1}).to_vector<double>() == std::vector<double>{0.5, 4.5});
  CHECK(min(x, {0}).to_vector<double>() == std::vector<double>{1, 2});
  CHECK(clamp(x, 2.0, 5.0).to_vector<double>() == std::vector<double>{2, 2, 4, 5});
}

TEST_CASE("std's gradient is 0 where the std is 0, as PyTorch's") {
  // Row 0 is constant: std 0, and d std/dx = (x - mean)/((n - 1)·std) is 0/0 there. PyTorch gives 0.
  const Tensor x = from_vector(std::vector<double>{2, 2, 2, 1, 2, 4}, {2, 3}).requires_grad_();
  mt::std(x, {1}).sum().backward();
  // Row 1: mean 7/3, std √(7/3), so dx = (x - 7/3)/(2·√(7/3)).
  const double s = std::sqrt(7.0 / 3.0);
  const std::vector<double> dx = x.grad().to_vector<double>();
  CHECK(dx[0] == 0.0);
  CHECK(dx[1] == 0.0);
  CHECK(dx[2] == 0.0);
  CHECK(dx[3] == doctest::Approx((1 - 7.0 / 3) / (2 * s)));
  CHECK(dx[4] == doctest::Approx((2 - 7.0 / 3) / (2 * s)));
  CHECK(dx[5] == doctest::Approx((4 - 7.0 / 3) / (2 * s)));
}

TEST_CASE("unbiased var of one element is 0/0: NaN, and so is its gradient") {
  // PyTorch 1.13 agrees on the value; for the gradient it returns dy·inf (see var in reductions.cpp).
  const Tensor x = scalar_tensor(3.0, {.dtype = kFloat64}).requires_grad_();
  const Tensor v = var(x);
  CHECK(std::isnan(v.item()));
  v.backward();
  CHECK(std::isnan(x.grad().item()));
}

TEST_CASE("clamp with min above max is max everywhere, with no gradient, as PyTorch's") {
  // min(max(x, 2), 1) = 1 whatever x is, so nothing of x reaches the output.
  const Tensor x = from_vector(std::vector<double>{-1, 0.5, 1.5, 3}, {4}).requires_grad_();
  const Tensor y = clamp(x, 2.0, 1.0);
  CHECK(y.to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("masked backwards give 0, not NaN, where an infinite gradient meets a zero mask") {
  // sqrt(relu(x)): at x <= 0 sqrt's backward sends 1/(2·0) = inf into relu's; PyTorch gives 0.
  const Tensor x = from_vector(std::vector<double>{-1.0, 0.0, 4.0}, {3}).requires_grad_();
  x.relu().sqrt().sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.25});

  // maximum / minimum / clamp: the losing side gets 0.
  const Tensor a = from_vector(std::vector<double>{0.0, 1.0}, {2}).requires_grad_();
  const Tensor zero = zeros({2}, {.dtype = kFloat64});
  const Tensor b = from_vector(std::vector<double>{-1.0, 3.0}, {2}).requires_grad_();
  maximum(a, b).sqrt().sum().backward();  // max = (0, 3): sqrt' = (inf, ·)
  CHECK(std::isinf(a.grad().to_vector<double>()[0]));
  CHECK(b.grad().to_vector<double>()[0] == 0.0);
  const Tensor c = from_vector(std::vector<double>{-2.0, 0.5}, {2}).requires_grad_();
  clamp(c, 0.0, std::nullopt).sqrt().sum().backward();
  CHECK(c.grad().to_vector<double>()[0] == 0.0);
  const Tensor d = from_vector(std::vector<double>{0.0, 5.0}, {2}).requires_grad_();
  (minimum(d, zero) * -1.0).sqrt().sum().backward();  // min = (0, 0) from d then zero: d[1] loses
  CHECK(d.grad().to_vector<double>()[1] == 0.0);

  // pow(x, 0) = 1 has gradient 0 everywhere, x = 0 included (0·0⁻¹ would be NaN).
  const Tensor p = from_vector(std::vector<double>{0.0, 2.0}, {2}).requires_grad_();
  p.pow(0.0).sum().backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{0.0, 0.0});

  // max over a dim: the non-maxima get 0 even when the maximum's gradient is infinite.
  const Tensor m = from_vector(std::vector<double>{0.0, -1.0}, {2}).requires_grad_();
  m.max().sqrt().backward();
  CHECK(m.grad().to_vector<double>()[1] == 0.0);
}
