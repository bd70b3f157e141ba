// logsumexp, cumsum, flip, roll, where with a scalar, expm1/log1p and one_hot (issue 40): gradcheck in
// float64 over a few shapes, a transposed input in each, and the properties their notes promise.
// PyTorch's values for them: tests/nn/test_torch_ops.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "minitrain.h"
#include "gradcheck_case.h"
#include "tensor/raw_ops.h"

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

TEST_CASE("cumsum: the CPU's one-pass scan equals the composed doubling scan (Note [Cumsum by doubling])") {
  Generator gen(55);
  const Tensor x = randn({3, 37, 5}, gen, {.dtype = kFloat64});  // 37: not a power of two
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    const Tensor one_pass = raw::cumsum(x, 1, reverse);
    const Tensor doubling = empty({3, 37, 5}, {.dtype = kFloat64});
    backend(kCPU).Backend::cumsum(doubling, x, reverse);  // the base class's composition, called by name
    CHECK((one_pass - doubling).abs().max().item() <= 1e-12);
  }
}

TEST_CASE("cumsum equals a left-to-right loop, and works on int64") {
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

TEST_CASE("float32 exp and sigmoid: the vectorised exp within 2 ulp of double's, 4 for sigmoid, with overflow, underflow and NaN as libm (Note [Vectorised float exp])") {
  // Every size from 1 to 19 (whole vectors and tails) over -110 .. 95, past both ends of float32's range.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const double ulp = std::ldexp(1.0, -23);  // relative spacing of floats: at most 2^-23
  for (int64_t n = 1; n < 20; ++n) {
    CAPTURE(n);
    std::vector<float> xs(n);
    for (int64_t i = 0; i < n; ++i) xs[i] = -110.0f + 205.0f * static_cast<float>(i) / static_cast<float>(n) + 0.37f;
    const Tensor x = from_vector(xs, {n});
    const std::vector<float> e = exp(x).to_vector<float>(), s = sigmoid(x).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(xs[i]);
      const double want = std::exp(static_cast<double>(xs[i])), want_s = 1.0 / (1.0 + std::exp(-static_cast<double>(xs[i])));
      if (want > 3.4028234663852886e38) CHECK(e[i] == inf);
      else if (want < 1.1754943508222875e-38) CHECK(e[i] <= 1.2e-38f);  // subnormal results: rounded twice, or 0
      else CHECK(std::abs(e[i] - want) <= 2 * ulp * want);
      if (want_s >= 1.1754943508222875e-38) CHECK(std::abs(s[i] - want_s) <= 4 * ulp * want_s);
      else CHECK(s[i] <= 1.2e-38f);
    }
  }
  const std::vector<float> special{-inf, inf, nan, 0.0f, 88.72f, -103.9f, 1e30f, -1e30f, 0.5f};
  const std::vector<float> e = exp(from_vector(special, {9})).to_vector<float>(),
                           s = sigmoid(from_vector(special, {9})).to_vector<float>();
  CHECK(e[0] == 0.0f);
  CHECK(e[1] == inf);
  CHECK(std::isnan(e[2]));
  CHECK(e[3] == 1.0f);
  CHECK(std::abs(e[4] - std::exp(double{88.72f})) <= 2 * ulp * std::exp(double{88.72f}));  // finite, below overflow
  CHECK(e[5] > 0.0f);                                                      // a subnormal, not 0
  CHECK(e[6] == inf);
  CHECK(e[7] == 0.0f);
  CHECK(s[0] == 0.0f);
  CHECK(s[1] == 1.0f);
  CHECK(std::isnan(s[2]));
  CHECK(s[3] == 0.5f);
  CHECK(s[6] == 1.0f);
  CHECK(s[7] == 0.0f);
}

TEST_CASE("float32 softmax and log_softmax: the vectorised exp within a few ulp of libm's, -inf gives 0, NaN stays (Note [Vectorised float exp])") {
  // The reference takes the same float32 x - max (its rounding is the input's, not exp's), then exp,
  // the sum and the division in double.
  Generator gen(56);
  for (int64_t n : {1, 7, 8, 9, 37, 1000}) {
    CAPTURE(n);
    const Tensor x = randn({5, n}, gen) * 30.0f;  // float32, spanning e^-150 .. e^0 after the shift
    const std::vector<float> xs = x.to_vector<float>(), got = softmax(x, 1).to_vector<float>(),
                             got_log = log_softmax(x, 1).to_vector<float>();
    for (int64_t r = 0; r < 5; ++r) {
      const float* row = xs.data() + r * n;
      const float m = *std::max_element(row, row + n);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i] - m));
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(row[i] - m)) / sum;
        const double want_log = static_cast<double>(row[i] - m) - std::log(sum);
        if (row[i] - m < -87.0f) CHECK(got[r * n + i] <= 1e-37f);  // subnormal or 0: rounded twice
        else CHECK(std::abs(got[r * n + i] - want) <= 8 * 6e-8 * want);
        CHECK(std::abs(got_log[r * n + i] - want_log) <= 8 * 6e-8 * std::max(1.0, std::abs(want_log)));
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> masked = softmax(from_vector(std::vector<float>{1, -inf, 2, -inf, 0, 3, -inf, 1, 2}, {9}), 0)
                                        .to_vector<float>();
  CHECK(masked[1] == 0.0f);
  CHECK(masked[3] == 0.0f);
  CHECK(masked[6] == 0.0f);
  for (float v : softmax(from_vector(std::vector<float>{1, nan, 2, 3, 4, 5, 6, 7, 8, 9}, {10}), 0).to_vector<float>())
    CHECK(std::isnan(v));
}
