// The activations of nn/activation.h beyond ReLU/Tanh/Sigmoid/GELU, by gradcheck in float64 over a
// few shapes (a transposed input among them), and at the inputs where a careless composition breaks:
// huge arguments, where exp overflows in the branch not taken (Note [Guarded branches]), and the
// precision of softplus and ELU far out in their tails. PyTorch's values: tests/nn/test_torch_ops.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "minitrain.h"
#include "nn/nn.h"

using namespace mt;

namespace {

using Act = std::function<Tensor(const Tensor&)>;

std::vector<std::pair<std::string, Act>> activations() {
  return {{"silu", [](const Tensor& x) { return nn::F::silu(x); }},
          {"leaky_relu", [](const Tensor& x) { return nn::F::leaky_relu(x, 0.1); }},
          {"elu", [](const Tensor& x) { return nn::F::elu(x, 0.7); }},
          {"softplus", [](const Tensor& x) { return nn::F::softplus(x); }},
          {"softplus beta 3 threshold 2", [](const Tensor& x) { return nn::F::softplus(x, 3.0, 2.0); }},
          {"mish", [](const Tensor& x) { return nn::F::mish(x); }},
          {"hardswish", [](const Tensor& x) { return nn::F::hardswish(x); }}};
}

}  // namespace

TEST_CASE("activations: gradcheck in float64, contiguous and transposed") {
  Generator gen(40);
  for (const auto& [name, f] : activations()) {
    CAPTURE(name);
    for (const Shape& s : {Shape{7}, Shape{3, 5}, Shape{2, 3, 4}}) {
      // values in [-5, 5), away from the kinks (0 and ±3) by more than the finite-difference step
      const Tensor x = (rand(s, gen, {.dtype = kFloat64}) * 10.0 - 5.0).requires_grad_();
      const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& v) { return f(v[0]); }, {x});
      INFO(r.message);
      CHECK(r.ok);
    }
    const Tensor x = (rand({4, 6}, gen, {.dtype = kFloat64}) * 10.0 - 5.0).requires_grad_();
    const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& v) { return f(v[0].t()); }, {x});
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("activations: finite values and gradients at huge inputs (the branch not taken never leaks NaN)") {
  const Tensor x = from_vector(std::vector<double>{-1e4, -800, -40, 0, 40, 800, 1e4}, {7}).requires_grad_();
  for (const auto& [name, f] : activations()) {
    CAPTURE(name);
    const Tensor y = f(x);
    y.sum().backward();
    for (double v : y.to_vector<double>()) CHECK(std::isfinite(v));
    for (double g : x.grad().to_vector<double>()) CHECK(std::isfinite(g));
    x.grad() = Tensor();
  }
}

TEST_CASE("softplus and elu keep full precision in their tails (log1p and expm1, not log(1 + ·) and exp(·) - 1)") {
  const Tensor far = from_vector(std::vector<double>{-40.0}, {1});
  CHECK(nn::F::softplus(far).item() == doctest::Approx(std::log1p(std::exp(-40.0))).epsilon(1e-15));  // 4.2e-18, not 0
  const Tensor tiny = from_vector(std::vector<double>{-1e-10}, {1});
  CHECK(nn::F::elu(tiny).item() == doctest::Approx(std::expm1(-1e-10)).epsilon(1e-15));
  // the linear region: x itself above threshold/β, as PyTorch
  CHECK(nn::F::softplus(from_vector(std::vector<double>{11.0}, {1}), 2.0, 20.0).item() == 11.0);
}

TEST_CASE("activation modules print their options") {
  std::ostringstream s;
  s << nn::SiLU() << ' ' << nn::LeakyReLU({.negative_slope = 0.2}) << ' ' << nn::ELU() << ' ' << nn::Softplus({.beta = 2})
    << ' ' << nn::Mish() << ' ' << nn::Hardswish();
  CHECK(s.str() == "SiLU() LeakyReLU(negative_slope=0.2) ELU(alpha=1) Softplus(beta=2, threshold=20) Mish() Hardswish()");
}

TEST_CASE("mish in float32: within 8 ulp (of the larger of |y| and 1e-3) of x·tanh(softplus(x)) in float64") {
  // mish is x·n/(n + 2) with n = eˣ(eˣ + 2), the vectorised exp's; the reference is the definition.
  std::vector<float> xs;
  for (int i = 0; i < 4000; ++i) xs.push_back(-60.0f + 0.021f * static_cast<float>(i));  // -60 .. 24
  const std::vector<float> got = nn::F::mish(from_vector(xs, {static_cast<int64_t>(xs.size())})).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], want = x * std::tanh(std::log1p(std::exp(x)));
    CAPTURE(x);
    CHECK(std::abs(got[i] - want) <= 8 * std::ldexp(1.0, -23) * std::max(std::abs(want), 1e-3));
  }
}
