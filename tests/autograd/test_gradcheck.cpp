// Every differentiable op against central finite differences in float64, including broadcasting,
// non-contiguous inputs and views.
#include <doctest/doctest.h>

#include "minitrain.h"

using namespace mt;

namespace {
Generator gen(2024);

// A float64 leaf of random values in [lo, hi).
Tensor input(const Shape& s, double lo = -1.0, double hi = 1.0) {
  Tensor t = rand(s, gen, {.dtype = kFloat64}) * (hi - lo) + lo;
  return t.requires_grad_();
}

void check(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
           GradcheckOptions opts = {}) {
  const GradcheckResult r = gradcheck(f, inputs, opts);
  INFO(r.message);
  CHECK(r.ok);
}
using V = const std::vector<Tensor>&;
}  // namespace

TEST_CASE("gradcheck: binary ops with broadcasting") {
  check([](V x) { return x[0] + x[1]; }, {input({3, 4}), input({4})});
  check([](V x) { return x[0] - x[1]; }, {input({3, 1}), input({1, 4})});
  check([](V x) { return x[0] * x[1]; }, {input({2, 3, 4}), input({3, 1})});
  check([](V x) { return x[0] / x[1]; }, {input({3, 4}), input({4}, 0.5, 2.0)});
  check([](V x) { return maximum(x[0], x[1]); }, {input({3, 4}), input({3, 4})});
  check([](V x) { return minimum(x[0], x[1]); }, {input({3, 4}), input({4})});
  check([](V x) { return where(gt(x[0], x[1]), x[0], x[1] * 2.0); }, {input({3, 4}), input({3, 4})});
  check([](V x) { return (x[0] + 2.0) * 3.0 - 1.0; }, {input({5})});
}

TEST_CASE("gradcheck: unary ops") {
  check([](V x) { return -x[0]; }, {input({4})});
  check([](V x) { return x[0].exp(); }, {input({4})});
  check([](V x) { return x[0].log(); }, {input({4}, 0.5, 2.0)});
  check([](V x) { return x[0].sqrt(); }, {input({4}, 0.5, 2.0)});
  check([](V x) { return x[0].tanh(); }, {input({4})});
  check([](V x) { return x[0].sigmoid(); }, {input({4})});
  check([](V x) { return x[0].relu(); }, {input({8})});
  check([](V x) { return x[0].abs(); }, {input({8})});
  check([](V x) { return erf(x[0]); }, {input({4})});
  check([](V x) { return x[0].pow(3); }, {input({4})});
  check([](V x) { return x[0].pow(-1.5); }, {input({4}, 0.5, 2.0)});
}

TEST_CASE("gradcheck: reductions") {
  check([](V x) { return x[0].sum(); }, {input({3, 4})});
  check([](V x) { return x[0].sum({0}); }, {input({3, 4})});
  check([](V x) { return x[0].sum({1}, true); }, {input({3, 4})});
  check([](V x) { return x[0].sum({0, 2}); }, {input({2, 3, 4})});
  check([](V x) { return x[0].mean(); }, {input({3, 4})});
  check([](V x) { return x[0].mean({1}); }, {input({3, 4})});
  check([](V x) { return x[0].max(); }, {input({3, 4})});
  check([](V x) { return x[0].amax({1}); }, {input({3, 4})});
  check([](V x) { return std::get<0>(x[0].max(1)); }, {input({3, 4})});
  check([](V x) { return std::get<0>(x[0].max(0, true)); }, {input({3, 4})});
  check([](V x) { return std::get<0>(x[0].min(-1)); }, {input({2, 3, 4})});
}

TEST_CASE("gradcheck: matmul, linear, softmax") {
  check([](V x) { return x[0].matmul(x[1]); }, {input({3, 4}), input({4, 2})});
  check([](V x) { return x[0].matmul(x[1]); }, {input({2, 3, 4}), input({4, 5})});      // broadcast batch
  check([](V x) { return x[0].matmul(x[1]); }, {input({2, 1, 3, 4}), input({3, 4, 2})});
  check([](V x) { return x[0].matmul(x[1]); }, {input({4}), input({4, 2})});            // vector @ matrix
  check([](V x) { return x[0].matmul(x[1]); }, {input({3, 4}), input({4})});            // matrix @ vector
  check([](V x) { return x[0].t().matmul(x[1]); }, {input({4, 3}), input({4, 2})});      // transposed input
  check([](V x) { return linear(x[0], x[1], x[2]); }, {input({5, 3}), input({2, 3}), input({2})});
  check([](V x) { return linear(x[0], x[1]); }, {input({2, 5, 3}), input({4, 3})});
  check([](V x) { return x[0].softmax(1); }, {input({3, 4})});
  check([](V x) { return x[0].softmax(0); }, {input({3, 4})});
  check([](V x) { return x[0].log_softmax(-1); }, {input({3, 4})});
}

TEST_CASE("gradcheck: indexing") {
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  check([&](V x) { return x[0].index_select(0, idx); }, {input({3, 4})});
  check([&](V x) { return x[0].index_select(1, idx); }, {input({2, 3})});
  const Tensor gidx = from_vector(std::vector<int64_t>{1, 0, 1, 1, 2, 2}, {3, 2});
  check([&](V x) { return x[0].gather(1, gidx); }, {input({3, 3})});
}

TEST_CASE("gradcheck: views and casts") {
  check([](V x) { return x[0].view({4, 3}); }, {input({3, 4})});
  check([](V x) { return x[0].t().reshape({12}); }, {input({3, 4})});
  check([](V x) { return x[0].transpose(0, 2); }, {input({2, 3, 4})});
  check([](V x) { return x[0].permute({2, 0, 1}) * x[1]; }, {input({2, 3, 4}), input({4, 2, 3})});
  check([](V x) { return x[0].narrow(1, 1, 2); }, {input({3, 4})});
  check([](V x) { return x[0].slice(0, 0, 5, 2); }, {input({5, 2})});
  check([](V x) { return x[0].expand({3, 4}); }, {input({3, 1})});
  check([](V x) { return x[0].unsqueeze(1).squeeze(); }, {input({3, 4})});
  check([](V x) { return x[0].flatten(); }, {input({2, 3})});
  check([](V x) { return x[0].t().contiguous(); }, {input({2, 3})});
  // Through float32 the function is only float32-accurate: a larger step keeps rounding out of it.
  check([](V x) { return x[0].to(kFloat32).to(kFloat64) * 1.0; }, {input({3})}, {.eps = 1e-2, .atol = 1e-4});
}

TEST_CASE("gradcheck: the seed model's loss, a small MLP") {
  // MSE of y = x·wᵀ + b: the math of the seed job.
  const Tensor x = randn({8, 10}, gen, {.dtype = kFloat64}), y = randn({8, 1}, gen, {.dtype = kFloat64});
  check([&](V p) { return (linear(x, p[0], p[1]) - y).pow(2).mean(); }, {input({1, 10}), input({1})});
  // Two layers with ReLU and cross-entropy written from primitives.
  const Tensor labels = from_vector(std::vector<int64_t>{0, 2, 1, 2, 0, 1, 1, 0}, {8, 1});
  check([&](V p) {
    const Tensor h = linear(x, p[0], p[1]).relu();
    const Tensor logp = linear(h, p[2]).log_softmax(1);
    return -logp.gather(1, labels).mean();
  }, {input({5, 10}), input({5}), input({3, 5})});
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // A function whose recorded history lies: the forward is x² but the graph says 2·x·x.detach()+x².
  const auto wrong = [](V x) { return x[0] * x[0] + x[0].detach() * x[0] * 0.5; };
  // The derivative autograd computes is 2x + 0.5x, the numeric one 2x + x: they must disagree.
  const GradcheckResult r = gradcheck(wrong, {input({3})});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
}
