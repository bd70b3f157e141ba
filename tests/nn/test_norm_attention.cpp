// GroupNorm, InstanceNorm2d, layer_norm over several dims, masked attention and embedding padding_idx
// (issue 40): gradcheck in float64 with transposed inputs, the invariants the layers promise, and the
// errors bad input gets. PyTorch's values for them: tests/nn/test_torch_layers.cpp.
#include <doctest/doctest.h>

#include <functional>
#include <limits>

#include "minitrain.h"
#include "tests/autograd/gradcheck_case.h"
#include "nn/nn.h"

using namespace mt;

namespace {
Generator gen(4041);

Tensor input(const Shape& s, double lo = -1.0, double hi = 1.0) {
  return (rand(s, gen, {.dtype = kFloat64}) * (hi - lo) + lo).requires_grad_();
}

using V = const std::vector<Tensor>&;
const auto check = &test::check_gradcheck;

Tensor ints(const std::vector<int64_t>& v, const Shape& s) { return from_vector(v, s); }
}  // namespace

TEST_CASE("gradcheck: layer_norm over two and three trailing dims, affine or not, transposed") {
  check([](V a) { return nn::F::layer_norm(a[0], {3, 4}, a[1], a[2]); }, {input({2, 3, 4}), input({3, 4}), input({3, 4})});
  check([](V a) { return nn::F::layer_norm(a[0].transpose(0, 2), {3, 2}); }, {input({2, 3, 4})});
  check([](V a) { return nn::F::layer_norm(a[0], {2, 2, 3}, a[1]); }, {input({2, 2, 3}), input({2, 2, 3})});
}

TEST_CASE("LayerNorm without elementwise_affine has no parameters, a wrong trailing shape is an error") {
  nn::LayerNorm plain(Shape{3, 4}, {.elementwise_affine = false});
  CHECK(plain.parameters().empty());
  CHECK(nn::LayerNorm(Shape{3, 4}).named_parameters().size() == 2);
  CHECK(nn::LayerNorm(Shape{3, 4}).weight.sizes() == Shape{3, 4});
  CHECK_THROWS_WITH_AS(plain(zeros({2, 4, 3})), doctest::Contains("must end in [3, 4]"), Error);
  CHECK_THROWS_WITH_AS(nn::F::layer_norm(zeros({2, 3, 4}), {3, 4}, zeros({4})), doctest::Contains("weight"), Error);
}

TEST_CASE("gradcheck: group_norm and instance_norm, affine or not, transposed") {
  check([](V a) { return nn::F::group_norm(a[0], 2, a[1], a[2]); }, {input({2, 4, 3}), input({4}), input({4})});
  check([](V a) { return nn::F::group_norm(a[0].transpose(2, 3), 3); }, {input({2, 3, 2, 3})});
  check([](V a) { return nn::F::instance_norm(a[0], {}, {}, a[1], a[2]); },
        {input({2, 3, 2, 3}), input({3}), input({3})});
}

TEST_CASE("GroupNorm: each (sample, group) has mean 0 and variance 1 before the affine map, bad groups are errors") {
  nn::GroupNorm gn(2, 4, {.affine = false});
  const Tensor y = gn(input({3, 4, 5}, -3, 7).detach());
  const Tensor groups = y.reshape({3, 2, 10});
  for (double m : mean(groups, {2}).to_vector<double>()) CHECK(std::abs(m) < 1e-6);
  for (double v : var(groups, {2}, {.unbiased = false}).to_vector<double>()) CHECK(v == doctest::Approx(1.0).epsilon(1e-4));
  CHECK(gn.parameters().empty());
  CHECK_THROWS_WITH_AS(nn::GroupNorm(3, 4), doctest::Contains("must be positive and divide num_channels"), Error);
  CHECK_THROWS_WITH_AS(nn::GroupNorm(2, 4)(zeros({2, 6, 3})), doctest::Contains("expected input of shape (N, 4"), Error);
}

TEST_CASE("InstanceNorm2d: PyTorch's defaults (no affine, no running statistics), tracking keeps buffers") {
  nn::InstanceNorm2d plain(3);
  CHECK(plain.parameters().empty());
  CHECK(plain.buffers().empty());
  nn::InstanceNorm2d tracked(3, {.affine = true, .track_running_stats = true});
  CHECK(tracked.named_buffers().size() == 3);
  CHECK(tracked.parameters().size() == 2);
  // eval without running statistics still normalises each plane by its own statistics
  plain.eval();
  const Tensor y = plain(input({2, 3, 4, 4}, 5, 9).detach());
  for (double m : mean(y, {2, 3}).to_vector<double>()) CHECK(std::abs(m) < 1e-6);
  CHECK_THROWS_WITH_AS(plain(zeros({2, 4, 3, 3})), doctest::Contains("expected input of shape (N, 3, H, W)"), Error);
}

TEST_CASE("gradcheck: attention with an int64 mask, an additive mask (in the mask too), dv != d, 3-D") {
  const Tensor keep = ints({1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1}, {3, 4});
  check([&](V a) { return scaled_dot_product_attention(a[0], a[1], a[2], keep); },
        {input({2, 2, 3, 5}), input({2, 2, 4, 5}), input({2, 2, 4, 5})});
  check([](V a) { return scaled_dot_product_attention(a[0], a[1], a[2], a[3], {.causal = true}); },
        {input({1, 2, 4, 3}), input({1, 2, 4, 3}), input({1, 2, 4, 6}), input({1, 2, 4, 4})});
  check([](V a) { return scaled_dot_product_attention(a[0].transpose(1, 2), a[1], a[2]); },
        {input({3, 4, 2}), input({3, 5, 4}), input({3, 5, 2})});
}

TEST_CASE("attention: a masked key changes nothing, -inf additive equals 0 in an int64 mask, bad masks are errors") {
  const Tensor q = input({1, 2, 3, 4}).detach(), k = input({1, 2, 5, 4}).detach(), v = input({1, 2, 5, 4}).detach();
  const Tensor keep = ints({1, 1, 1, 0, 0}, {5});  // the last two keys are padding
  const Tensor masked = scaled_dot_product_attention(q, k, v, keep);
  const Tensor cut = scaled_dot_product_attention(q, k.narrow(2, 0, 3), v.narrow(2, 0, 3));  // fused, 3 keys
  const std::vector<double> a = masked.to_vector<double>(), b = cut.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-12));
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor additive = from_vector(std::vector<double>{0, 0, 0, -inf, -inf}, {5});
  CHECK(scaled_dot_product_attention(q, k, v, additive).to_vector<double>() == a);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, ints({1, 1, 1, 1}, {4})),
                       doctest::Contains("must broadcast to the scores' shape"), Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v.narrow(2, 0, 4)), doctest::Contains("must be (1, 2, Tk"),
                       Error);
}

TEST_CASE("MultiheadAttention: padded keys change no output of the real positions") {
  nn::MultiheadAttention mha(8, 2);
  mha.to(kFloat64);
  const Tensor x = input({2, 5, 8}).detach();
  const Tensor pad = ints({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5});  // sample 0: the last two are padding
  const Tensor y = mha.forward(x, {.key_padding_mask = pad});
  const Tensor alone = mha(x.narrow(0, 0, 1).narrow(1, 0, 3));  // sample 0's three real tokens
  const std::vector<double> a = y.narrow(0, 0, 1).narrow(1, 0, 3).to_vector<double>(), b = alone.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-12));
  const std::vector<double> c = y.narrow(0, 1, 1).to_vector<double>(), d = mha(x.narrow(0, 1, 1)).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) CHECK(c[i] == doctest::Approx(d[i]).epsilon(1e-12));  // sample 1: no padding
  CHECK_THROWS_WITH_AS(mha.forward(x, {.key_padding_mask = zeros({2, 4}, {.dtype = kInt64})}),
                       doctest::Contains("key_padding_mask must be (2, 5)"), Error);
}

TEST_CASE("Embedding padding_idx: the row starts at zero and gets no gradient, the others theirs") {
  nn::Embedding emb(5, 3, {.padding_idx = 1});
  CHECK(emb.weight.narrow(0, 1, 1).to_vector<float>() == std::vector<float>{0, 0, 0});
  const Tensor idx = ints({1, 0, 1, 4, 1}, {5});
  (emb(idx) * 2.0).sum().backward();
  const std::vector<float> g = emb.weight.grad().to_vector<float>();
  CHECK(std::vector<float>(g.begin() + 3, g.begin() + 6) == std::vector<float>{0, 0, 0});
  CHECK(std::vector<float>(g.begin(), g.begin() + 3) == std::vector<float>{2, 2, 2});
  CHECK(std::vector<float>(g.begin() + 12, g.end()) == std::vector<float>{2, 2, 2});
  CHECK_THROWS_WITH_AS(nn::Embedding(5, 3, {.padding_idx = 5}), doctest::Contains("must be in [-5, 5)"), Error);
}
