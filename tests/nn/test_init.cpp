// nn::init: fans and gains as PyTorch computes them, bounds of the uniform fills, the std of the
// normal ones (on large tensors, within a few standard errors), and that the fills work on
// parameters, on strided views and reproducibly from a generator.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "minitrain.h"
#include "nn/nn.h"

using namespace mt;
namespace init = mt::nn::init;

namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / (v.size() - 1));
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

// A fill of U(-bound, bound) on many elements: inside the bounds, reaching close to both, with the
// uniform's std bound/√3.
void check_uniform(const Tensor& t, double bound) {
  const Stats s = stats(t);
  CHECK(s.min >= -bound);
  CHECK(s.max < bound);
  CHECK(s.min < -0.99 * bound);
  CHECK(s.max > 0.99 * bound);
  CHECK(s.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
}

// N(0, std²) on 2^18 elements: the sample std is within 1% (≈ 7 standard errors).
void check_normal(const Tensor& t, double std) {
  const Stats s = stats(t);
  CHECK(std::abs(s.mean) < 0.01 * std);
  CHECK(s.std == doctest::Approx(std).epsilon(0.01));
}

}  // namespace

TEST_CASE("init: fans and gains as PyTorch computes them") {
  const init::Fans linear = init::calculate_fans(empty({256, 784}));
  CHECK(linear.fan_in == 784);
  CHECK(linear.fan_out == 256);
  const init::Fans conv = init::calculate_fans(empty({16, 3, 5, 5}));  // (out, in, kh, kw)
  CHECK(conv.fan_in == 3 * 25);
  CHECK(conv.fan_out == 16 * 25);
  CHECK_THROWS_WITH_AS(init::calculate_fans(empty({10})), doctest::Contains("at least 2 dims, got shape [10]"), Error);

  CHECK(init::calculate_gain(init::Nonlinearity::Linear) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::Sigmoid) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::Tanh) == doctest::Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::ReLU) == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyReLU) == doctest::Approx(std::sqrt(2.0 / (1 + 0.01 * 0.01))));
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)) == doctest::Approx(std::sqrt(1.0 / 3.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::SELU) == 0.75);
}

TEST_CASE("init: uniform variants stay in their bounds") {
  Generator gen(41);
  const Tensor w = empty({512, 512});
  check_uniform(init::uniform_(w, -0.5, 0.5, gen), 0.5);
  // kaiming_uniform_ defaults (a = 0, fan_in, leaky_relu): bound = √2·√(3/fan_in) = √(6/fan_in)
  check_uniform(init::kaiming_uniform_(w, {}, gen), std::sqrt(6.0 / 512));
  // PyTorch's Linear weight init: a = √5 gives bound 1/√fan_in
  const Tensor lin = empty({256, 1024});
  check_uniform(init::kaiming_uniform_(lin, {.a = std::sqrt(5.0)}, gen), 1.0 / std::sqrt(1024.0));
  check_uniform(init::kaiming_uniform_(lin, {.mode = init::FanMode::FanOut, .nonlinearity = init::Nonlinearity::ReLU},
                                       gen),
                std::sqrt(6.0 / 256));
  // xavier_uniform_: bound = gain·√(6 / (fan_in + fan_out))
  check_uniform(init::xavier_uniform_(lin, 1.0, gen), std::sqrt(6.0 / (256 + 1024)));
  check_uniform(init::xavier_uniform_(lin, init::calculate_gain(init::Nonlinearity::Tanh), gen),
                5.0 / 3.0 * std::sqrt(6.0 / (256 + 1024)));
}

TEST_CASE("init: normal variants have the std they promise") {
  Generator gen(42);
  const Tensor w = empty({512, 512}, {.dtype = kFloat64});
  check_normal(init::normal_(w, 0.0, 0.02, gen), 0.02);
  check_normal(init::kaiming_normal_(w, {.nonlinearity = init::Nonlinearity::ReLU}, gen), std::sqrt(2.0 / 512));
  const Tensor rect = empty({256, 1024});
  check_normal(init::kaiming_normal_(rect, {.mode = init::FanMode::FanOut}, gen), std::sqrt(2.0 / 256));
  check_normal(init::xavier_normal_(rect, 1.0, gen), std::sqrt(2.0 / (256 + 1024)));
  const Stats shifted = stats(init::normal_(w, 3.0, 1.0, gen));
  CHECK(shifted.mean == doctest::Approx(3.0).epsilon(0.005));
}

TEST_CASE("init: constants, parameters, strided views and reproducibility") {
  nn::Linear lin(3, 2);
  REQUIRE(lin.weight.requires_grad());
  init::ones_(lin.weight);  // no NoGradGuard needed: init runs under one
  CHECK(lin.weight.to_vector<float>() == std::vector<float>(6, 1.0f));
  init::zeros_(lin.bias);
  CHECK(lin.bias.to_vector<float>() == std::vector<float>(2, 0.0f));
  init::constant_(lin.bias, 0.25);
  CHECK(lin.bias.to_vector<float>() == std::vector<float>(2, 0.25f));
  CHECK(lin.weight.requires_grad());

  // A transposed view is filled through a temporary; the base sees the values.
  const Tensor base = zeros({4, 6});
  Generator g1(7), g2(7);
  init::uniform_(base.t(), 1.0, 2.0, g1);
  CHECK(stats(base).min >= 1.0);
  // Same seed, same values, the same as a contiguous draw of the transposed shape.
  const Tensor direct = init::uniform_(empty({6, 4}), 1.0, 2.0, g2);
  CHECK(base.t().contiguous().to_vector<float>() == direct.to_vector<float>());

  CHECK_THROWS_WITH_AS(init::uniform_(zeros({2}, {.dtype = kInt64})),
                       doctest::Contains("needs a floating-point tensor"), Error);
}
