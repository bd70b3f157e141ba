// group_norm's fused CPU kernel (tensor/cpu/cpu_group_norm.cpp) against its composition
// (mt::reference::group_norm: layer norm over the groups, then the broadcast affine map), values
// and every gradient, over the shapes where the kernel's indexing could slip: one group, a group
// per channel, one position per channel, no affine, an empty batch; gradcheck in float64; and the
// errors. PyTorch's values for group_norm: tests/nn/test_torch_layers.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "autograd/detail/reference_ops.h"
#include "minitrain.h"
#include "tensor/parallel.h"
#include "tests/autograd/same_values_and_gradients.h"

using namespace mt;

namespace {
Generator gen(4040);

Tensor input(const Shape& s, double lo = -1.0, double hi = 1.0, DType dtype = kFloat64) {
  return (rand(s, gen, {.dtype = dtype}) * (hi - lo) + lo).detach().requires_grad_();
}

using V = const std::vector<Tensor>&;

// group_norm with groups on inputs {x, weight, bias} (each may be undefined), by the kernel and by
// the composition: equal values, and equal gradients of sum(w·y) for every defined input.
void check_kernel(int64_t groups, const std::vector<Tensor>& inputs, double tol) {
  const auto kernel = [groups](V v) { return group_norm(v[0], groups, v[1], v[2]); };
  const Tensor y = kernel(inputs);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "GroupNormBackward");  // the kernel, not the composition again
  test::check_same(kernel, [groups](V v) { return reference::group_norm(v[0], groups, v[1], v[2]); }, inputs, tol, gen);
}

void check_grad(const std::function<Tensor(V)>& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.message);
  CHECK(r.ok);
}
}  // namespace

TEST_CASE("group_norm: the kernel equals the composition, values and gradients") {
  SUBCASE("affine, 4-D") { check_kernel(3, {input({2, 6, 3, 4}, -3, 3), input({6}), input({6})}, 1e-12); }
  SUBCASE("one group") { check_kernel(1, {input({3, 4, 5}), input({4}), input({4})}, 1e-12); }
  SUBCASE("a group per channel") { check_kernel(4, {input({2, 4, 2, 3}), input({4}), input({4})}, 1e-12); }
  SUBCASE("one position per channel, 2-D") { check_kernel(2, {input({5, 6}), input({6}), input({6})}, 1e-12); }
  SUBCASE("a group per channel and one position: x̂ = 0") {
    check_kernel(3, {input({2, 3}), input({3}), input({3})}, 1e-12);
  }
  SUBCASE("no affine, weight only, bias only") {
    check_kernel(2, {input({2, 4, 3}), Tensor(), Tensor()}, 1e-12);
    check_kernel(2, {input({2, 4, 3}), input({4}), Tensor()}, 1e-12);
    check_kernel(2, {input({2, 4, 3}), Tensor(), input({4})}, 1e-12);
  }
  SUBCASE("transposed input, and a large mean: the two-pass variance keeps the digits") {
    check_kernel(2, {input({2, 3, 4, 6}).transpose(1, 3), input({6}), input({6})}, 1e-12);
    check_kernel(2, {input({3, 4, 5}, 1000, 1001), input({4}), input({4})}, 1e-9);
  }
  SUBCASE("float32, a layer of the bench's shape") {
    check_kernel(8, {input({2, 64, 7, 7}, -2, 2, kFloat32), input({64}, -1, 1, kFloat32),
                     input({64}, -1, 1, kFloat32)}, 2e-5);
  }
}

TEST_CASE("gradcheck: group_norm's kernel, affine or not, one group, a group per channel, one position") {
  check_grad([](V v) { return group_norm(v[0], 2, v[1], v[2]); }, {input({2, 4, 3}), input({4}), input({4})});
  check_grad([](V v) { return group_norm(v[0], 1, v[1], v[2]); }, {input({2, 3, 2, 2}), input({3}), input({3})});
  check_grad([](V v) { return group_norm(v[0], 3, v[1], v[2]); }, {input({2, 3, 4}), input({3}), input({3})});
  check_grad([](V v) { return group_norm(v[0], 2, v[1], v[2]); }, {input({3, 4}), input({4}), input({4})});
  check_grad([](V v) { return group_norm(v[0].transpose(2, 3), 3); }, {input({2, 3, 2, 3})});
}

TEST_CASE("group_norm: known values, each (sample, group) normalised on its own") {
  // Sample 0: group 0 holds channels 0, 1 = {1, 3 | 5, 7}: mean 4, variance 5; group 1 = {0, 0 | 2, 2}:
  // mean 1, variance 1. Then channel c is scaled by w[c] and shifted by b[c].
  const Tensor x = from_vector(std::vector<double>{1, 3, 5, 7, 0, 0, 2, 2}, {1, 4, 2});
  const Tensor w = from_vector(std::vector<double>{1, 2, 1, -1}, {4});
  const Tensor b = from_vector(std::vector<double>{0, 0, 10, 0}, {4});
  const double s = 1.0 / std::sqrt(5.0);
  const std::vector<double> want = {-3 * s, -1 * s, 2 * s, 6 * s, 10 - 1, 10 - 1, -1, -1};
  const std::vector<double> got = group_norm(x, 2, w, b, 0.0).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-14));
}

TEST_CASE("group_norm: an empty batch gives an empty output and zero weight and bias gradients") {
  const Tensor x = zeros({0, 4, 3}, {.dtype = kFloat64}).requires_grad_();
  const Tensor w = input({4}), b = input({4});
  const Tensor y = group_norm(x, 2, w, b);
  CHECK(y.sizes() == Shape{0, 4, 3});
  y.sum().backward();
  CHECK(x.grad().sizes() == Shape{0, 4, 3});
  CHECK(w.grad().to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(b.grad().to_vector<double>() == std::vector<double>(4, 0.0));
}

TEST_CASE("group_norm: the same bits on one thread and on two (Note [Fixed chunks])") {
  // 64 rows of 1024: two chunks of kGrainWork values.
  const Tensor x = input({8, 8, 32, 32}, -2, 2, kFloat32), w = input({8}, -1, 1, kFloat32);
  const Tensor b = input({8}, -1, 1, kFloat32), dy = input({8, 8, 32, 32}, -1, 1, kFloat32).detach();
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    NumThreadsGuard guard(threads);
    for (const Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    const Tensor y = group_norm(x, 8, w, b);
    (y * dy).sum().backward();
    std::vector<float> all = y.to_vector<float>();
    for (const Tensor* t : {&x, &w, &b}) {
      const std::vector<float> g = t->grad().to_vector<float>();
      all.insert(all.end(), g.begin(), g.end());
    }
    runs.push_back(all);
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("group_norm: bad groups and affine shapes are one clear error") {
  const Tensor x = zeros({2, 6, 3});
  CHECK_THROWS_WITH_AS(group_norm(x, 4), doctest::Contains("num_groups (4) must be positive and divide the channels (6)"),
                       Error);
  CHECK_THROWS_WITH_AS(group_norm(x, 0), doctest::Contains("num_groups (0) must be positive"), Error);
  CHECK_THROWS_WITH_AS(group_norm(x, 2, zeros({3})), doctest::Contains("weight [3] must be (6)"), Error);
  CHECK_THROWS_WITH_AS(group_norm(x, 2, Tensor(), zeros({6, 1})), doctest::Contains("bias [6, 1] must be (6)"),
                       Error);
  CHECK_THROWS_WITH_AS(group_norm(zeros({6}), 2), doctest::Contains("input must be (N, C, ...)"), Error);
}
