// The layers against known values: Linear (values and PyTorch's initial bounds), the activations
// (values from PyTorch, gradients by gradcheck), Flatten, Sequential, and Dropout in train and eval.
//
// Reference values come from PyTorch 1.13 (Debian's python3-torch), in float64:
//   x = torch.tensor([-3, -1, -0.5, 0, 0.5, 1, 3], dtype=torch.float64)
//   F.gelu(x), F.gelu(x, approximate='tanh'), torch.sigmoid(x), torch.tanh(x)
//   F.linear(X, W, b) with X, W, b as in the Linear test
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "minitrain.h"
#include "nn/nn.h"

using namespace mt;

namespace {

const std::vector<double> kX = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};

void check_close(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  const std::vector<double> v = t.to_vector<double>();
  REQUIRE(v.size() == expected.size());
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == doctest::Approx(expected[i]).epsilon(tol));
}

void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& f, const Shape& shape) {
  Generator gen(7);
  const Tensor x = (rand(shape, gen, {.dtype = kFloat64}) * 6.0 - 3.0).requires_grad_();
  const GradcheckResult r = gradcheck(f, {x});
  INFO(r.message);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("Linear: y = x·Wᵀ + b") {
  nn::Linear lin(3, 4);
  const std::vector<float> w = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.5f, 1.0f, 1.0f, 1.0f, -0.3f, 0.2f, 0.1f};
  const std::vector<float> b = {0.5f, -0.5f, 0.0f, 1.0f};
  lin.load_state_dict({{"weight", from_vector(w, {4, 3})}, {"bias", from_vector(b, {4})}});
  const Tensor y = lin(from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 0.5f}, {2, 3}));
  CHECK(y.sizes() == Shape{2, 4});
  // PyTorch: [[1.1, -1.0, 6.0, 1.4], [0.55, -0.75, -0.5, 1.35]] (float32)
  check_close(y, {1.1, -1.0, 6.0, 1.4, 0.55, -0.75, -0.5, 1.35}, 1e-6);
  CHECK(y.grad_fn()->name() == "LinearBackward");  // one fused op, bias included

  // Extra leading dims pass through, as in PyTorch.
  CHECK(lin(zeros({2, 5, 3})).sizes() == Shape{2, 5, 4});
  CHECK_THROWS_WITH_AS(lin(zeros({2, 5})),
                       doctest::Contains("Linear(in_features=3, out_features=4): input of shape [2, 5]"), Error);
}

TEST_CASE("Linear: initialised like PyTorch, U(-1/√in, 1/√in) for weight and bias") {
  manual_seed(11);
  nn::Linear lin(100, 200);
  const double bound = 1.0 / std::sqrt(100.0);
  for (const Tensor& p : {lin.weight, lin.bias}) {
    const std::vector<double> v = p.to_vector<double>();
    const double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    CHECK(lo >= -bound);
    CHECK(hi < bound);
    CHECK(hi > 0.9 * bound);  // the whole range is used (200 draws for the bias, 20000 for the weight)
    CHECK(lo < -0.9 * bound);
  }
  nn::Linear no_bias(3, 2, {.bias = false});
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.named_parameters().size() == 1);
  CHECK(no_bias(ones({1, 3})).sizes() == Shape{1, 2});
  CHECK_THROWS_WITH_AS(nn::Linear(0, 2), doctest::Contains("must be positive"), Error);
}

TEST_CASE("activations: values from PyTorch, gradients by gradcheck") {
  const Tensor x = from_vector(kX, {7});
  check_close(nn::ReLU()(x), {0, 0, 0, 0, 0.5, 1, 3});
  check_close(nn::Sigmoid()(x), {0.04742587317756678, 0.2689414213699951, 0.3775406687981454, 0.5,
                                 0.6224593312018546, 0.7310585786300049, 0.9525741268224334});
  check_close(nn::Tanh()(x), {-0.9950547536867305, -0.7615941559557649, -0.46211715726000974, 0.0,
                              0.46211715726000974, 0.7615941559557649, 0.9950547536867305});
  check_close(nn::GELU()(x), {-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
                              0.34573123063700656, 0.841344746068543, 2.99595030590511});
  check_close(nn::GELU({.approximate = nn::GeluApproximate::Tanh})(x),
              {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0, 0.34571400982514394,
               0.8411919906082768, 2.996362607918227});

  using V = const std::vector<Tensor>&;
  check_grad([](V v) { return nn::F::gelu(v[0]); }, {3, 5});
  check_grad([](V v) { return nn::F::gelu(v[0], nn::GeluApproximate::Tanh); }, {3, 5});
}

TEST_CASE("Flatten and Sequential") {
  CHECK(nn::Flatten()(zeros({2, 1, 28, 28})).sizes() == Shape{2, 784});
  CHECK(nn::Flatten(0, 1)(zeros({2, 3, 4})).sizes() == Shape{6, 4});

  manual_seed(5);
  auto first = std::make_shared<nn::Linear>(6, 5);
  auto second = std::make_shared<nn::Linear>(5, 2);
  nn::Sequential seq{std::make_shared<nn::Flatten>(), first, std::make_shared<nn::ReLU>(), second};
  CHECK(seq.size() == 4);
  CHECK(seq.at<nn::Linear>(1) == first);
  CHECK_THROWS_WITH_AS(seq.at<nn::Linear>(2), doctest::Contains("module 2 is a ReLU"), Error);
  CHECK_THROWS_WITH_AS(seq[4], doctest::Contains("index 4 is out of range for 4 modules"), Error);

  Generator gen(6);
  const Tensor x = rand({3, 2, 3}, gen);
  const Tensor expected = second->forward(first->forward(x.flatten(1)).relu());
  CHECK(seq(x).to_vector<float>() == expected.to_vector<float>());
  CHECK(seq.push_back(std::make_shared<nn::Sigmoid>())->name() == "Sigmoid");
  CHECK(seq.named_children().back().first == "4");
}

TEST_CASE("Dropout: inverted dropout while training, the identity in eval mode") {
  const Tensor x = ones({200'000}).requires_grad_();
  Generator gen(8);
  nn::Dropout drop({.p = 0.3, .generator = &gen});

  const Tensor y = drop(x);
  const std::vector<float> v = y.to_vector<float>();
  int64_t zeros_count = 0, badly_scaled = 0;  // a survivor is scaled by 1/(1-p)
  for (float e : v) {
    if (e == 0.0f) ++zeros_count;
    else if (e != static_cast<float>(1.0 / 0.7)) ++badly_scaled;
  }
  CHECK(badly_scaled == 0);
  // 200000 Bernoulli(0.3) draws: std of the fraction ≈ 0.001, so 0.3 ± 0.005 is 5 sigma.
  CHECK(static_cast<double>(zeros_count) / v.size() == doctest::Approx(0.3).epsilon(0.017));
  // The mean is preserved in expectation.
  CHECK(y.mean().item() == doctest::Approx(1.0).epsilon(0.01));
  // The gradient is the same mask: dy/dx = mask / (1 - p).
  y.sum().backward();
  CHECK(x.grad().to_vector<float>() == v);

  // Same generator state, same mask.
  Generator a(9), b(9);
  CHECK(nn::F::dropout(x, {.p = 0.5, .generator = &a}).to_vector<float>() ==
        nn::F::dropout(x, {.p = 0.5, .generator = &b}).to_vector<float>());

  drop.eval();
  CHECK(drop(x).is_same(x));
  drop.train();
  CHECK(nn::Dropout(0.0)(x).is_same(x));
  CHECK(nn::Dropout(1.0)(x).abs().max().item() == 0.0);
  CHECK_THROWS_WITH_AS(nn::Dropout(1.5), doctest::Contains("p must be in [0, 1], got 1.5"), Error);
}
