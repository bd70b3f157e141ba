// logsumexp, cumsum, flip, roll, where with a scalar, expm1/log1p and one_hot (issue 40): gradcheck in
// float64 over a few shapes, a transposed input in each, and the properties their notes promise.
// PyTorch's values for them: tests/nn/test_torch_ops.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "minitrain.h"
#include "gradcheck_case.h"

using namespace mt;

namespace {
Generator gen(4040);

Tensor input(const Shape& s, double lo = -1.0, double hi = 1.0) {
  return (rand(s, gen, {.dtype = kFloat64}) * (hi - lo) + lo).requires_grad_();
}

using V = const std::vector<Tensor>&;
const auto check = &test::check_gradcheck;
}  // namespace

TEST_CASE("gradcheck: logsumexp over one, several and all dims, keepdim or not, transposed") {
  check([](V x) { return logsumexp(x[0], {1}); }, {input({3, 4})});
  check([](V x) { return logsumexp(x[0], {0, 2}, true); }, {input({2, 3, 4})});
  check([](V x) { return logsumexp(x[0], {}); }, {input({2, 3})});
  check([](V x) { return logsumexp(x[0].t(), {-1}); }, {input({5, 3}, -50, 50)});
}

TEST_CASE("logsumexp: no overflow past exp's range, and ±inf slices as PyTorch (Note [Logsumexp shift])") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor big = from_vector(std::vector<double>{1000, 1000, -inf, -inf, 5, inf}, {3, 2}).requires_grad_();
  const std::vector<double> y = logsumexp(big, {1}).to_vector<double>();
  CHECK(y[0] == doctest::Approx(1000 + std::log(2.0)).epsilon(1e-15));
  CHECK(y[1] == -inf);
  CHECK(y[2] == inf);
  logsumexp(narrow(big, 0, 0, 1), {1}).sum().backward();
  const std::vector<double> g = big.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(0.5).epsilon(1e-12));  // 1000 + log 2 is rounded to 1e-13
  CHECK(g[1] == doctest::Approx(0.5).epsilon(1e-12));  // 1000 + log 2 is rounded to 1e-13
  CHECK(std::vector<double>(g.begin() + 2, g.end()) == std::vector<double>{0, 0, 0, 0});
  CHECK(logsumexp(big, {1}, true).sizes() == Shape{3, 1});
}

TEST_CASE("gradcheck: cumsum along each dim, lengths that are and are not powers of two, transposed") {
  check([](V x) { return cumsum(x[0], 0); }, {input({8})});
  check([](V x) { return cumsum(x[0], 1); }, {input({3, 7})});
  check([](V x) { return cumsum(x[0], -1); }, {input({2, 3, 5})});
  check([](V x) { return cumsum(x[0].t(), 0); }, {input({4, 9})});
}

TEST_CASE("cumsum: the doubling scan equals a left-to-right loop, and works on int64 (Note [Cumsum by doubling])") {
  const Tensor x = arange(1, 38, 1, {.dtype = kFloat64});  // 37 values: not a power of two
  const std::vector<double> got = cumsum(x, 0).to_vector<double>();
  double run = 0;
  for (int i = 0; i < 37; ++i) CHECK(got[i] == (run += i + 1));  // whole numbers: exact in any order
  CHECK(cumsum(arange(5), 0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 3, 6, 10});
  CHECK(cumsum(arange(5), 0).dtype() == kInt64);
}

TEST_CASE("gradcheck: flip and roll, several dims, negative shifts, flattened, transposed") {
  check([](V x) { return flip(x[0], {0, 2}); }, {input({2, 3, 4})});
  check([](V x) { return flip(x[0].t(), {-1}); }, {input({3, 5})});
  check([](V x) { return roll(x[0], {1, -2}, {0, 1}); }, {input({3, 5})});
  check([](V x) { return roll(x[0], {11}); }, {input({2, 3})});
  check([](V x) { return roll(x[0].t(), {-7}, {1}); }, {input({3, 4})});
}

TEST_CASE("flip and roll: a copy, even when nothing moves, and bad arguments are named") {
  const Tensor x = arange(6).reshape({2, 3});
  CHECK(flip(x, {1}).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 0, 5, 4, 3});
  CHECK(roll(x, {1}, {1}).to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1, 5, 3, 4});
  CHECK(!roll(x, {3}, {1}).is_same(x));
  CHECK_THROWS_WITH(flip(x, {1, -1}), doctest::Contains("flip: dim 1 appears more than once"));
  CHECK_THROWS_WITH(roll(x, {1, 2}, {0}), doctest::Contains("roll: shifts and dims must have the same length"));
}

TEST_CASE("gradcheck: where with a scalar on either side, expm1 and log1p") {
  const Tensor cond = from_vector(std::vector<double>{1, 0, 0, 1, 1, 0}, {2, 3});
  check([&](V x) { return where(cond, x[0], 0.5); }, {input({2, 3})});
  check([&](V x) { return where(cond, -2.0, x[0].t()); }, {input({3, 2})});
  check([](V x) { return expm1(x[0]); }, {input({3, 4})});
  check([](V x) { return log1p(x[0].t()); }, {input({4, 3}, -0.5, 2.0)});
  CHECK(where(cond, from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}), 0.5).dtype() == kFloat32);
  CHECK(expm1(from_vector(std::vector<double>{1e-12}, {1})).item() == doctest::Approx(1e-12).epsilon(1e-15));
  CHECK(log1p(from_vector(std::vector<double>{1e-12}, {1})).item() == doctest::Approx(1e-12).epsilon(1e-15));
}

TEST_CASE("one_hot: classes from the data or given, and out-of-range indices named") {
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0}, {2});
  CHECK(one_hot(idx).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0});
  CHECK(one_hot(idx, 4).sizes() == Shape{2, 4});
  CHECK_THROWS_WITH(one_hot(idx, 2), doctest::Contains("class index 2 is out of range for num_classes = 2"));
  CHECK_THROWS_WITH(one_hot(from_vector(std::vector<int64_t>{-1}, {1})), doctest::Contains("must be >= 0"));
}
