// sort, argsort, topk and repeat (issue 40): gradcheck in float64 (the values' gradient goes back
// through the indices), the stable order and NaN placement (Note [NaN sorts last]), structured
// bindings, and the errors bad arguments get. PyTorch's values: tests/nn/test_torch_layers.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "minitrain.h"
#include "gradcheck_case.h"

using namespace mt;

namespace {
Generator gen(4042);

Tensor input(const Shape& s) { return (rand(s, gen, {.dtype = kFloat64}) * 2.0 - 1.0).requires_grad_(); }

using V = const std::vector<Tensor>&;
const auto check = &test::check_gradcheck;
}  // namespace

TEST_CASE("gradcheck: sort's and topk's values along each dim, descending, transposed") {
  check([](V x) { return std::get<0>(sort(x[0], 1)); }, {input({3, 5})});
  check([](V x) { return std::get<0>(sort(x[0].t(), 0, true)); }, {input({3, 5})});
  check([](V x) { return std::get<0>(x[0].topk(2)); }, {input({2, 3, 4})});
  check([](V x) { return std::get<0>(topk(x[0].transpose(0, 2), 3, 1, false)); }, {input({2, 4, 3})});
}

TEST_CASE("sort is stable, puts NaN last (first descending), and binds to [values, indices]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor x = from_vector(std::vector<double>{2, nan, 1, 2, -inf, 1, nan, inf}, {8});
  auto [values, indices] = x.sort();
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{4, 2, 5, 0, 3, 7, 1, 6});
  CHECK(values.to_vector<double>()[3] == 2);
  CHECK(std::isnan(values.to_vector<double>()[7]));
  CHECK(x.argsort(0, true).to_vector<int64_t>() == std::vector<int64_t>{1, 6, 7, 0, 3, 2, 5, 4});
  const Tensor labels = from_vector(std::vector<int64_t>{3, 1, 3, 0}, {2, 2});
  auto [top, where] = labels.topk(1, 0);
  CHECK(top.to_vector<int64_t>() == std::vector<int64_t>{3, 1});
  CHECK(where.to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  CHECK(std::get<1>(sort(zeros({0, 3}), 0)).sizes() == Shape{0, 3});
  // topk takes ties in input order too, without sorting the rest (std::partial_sort, a total order)
  const Tensor ties = from_vector(std::vector<double>{1, 3, 3, 0, 3, 0}, {6});
  CHECK(std::get<1>(ties.topk(2)).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(std::get<1>(ties.topk(3, 0, false)).to_vector<int64_t>() == std::vector<int64_t>{3, 5, 0});
  CHECK(std::get<0>(ties.topk(0)).sizes() == Shape{0});
}

TEST_CASE("topk and repeat refuse what they cannot do") {
  CHECK_THROWS_WITH_AS(zeros({2, 3}).topk(4), doctest::Contains("topk: k (4) must be in [0, 3]"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).repeat({2}), doctest::Contains("at least as many dims as the input"), Error);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).repeat({2, -1}), doctest::Contains("must be non-negative"), Error);
}

TEST_CASE("gradcheck: repeat over the same and more dims, transposed, values tile") {
  check([](V x) { return x[0].repeat({2, 3}); }, {input({2, 3})});
  check([](V x) { return repeat(x[0].t(), {2, 1, 2}); }, {input({2, 3})});
  const Tensor x = from_vector(std::vector<double>{1, 2}, {2});
  CHECK(x.repeat({2, 2}).to_vector<double>() == std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2});
  CHECK(x.repeat({2, 2}).sizes() == Shape{2, 4});
  CHECK(x.repeat({0}).sizes() == Shape{0});
}
