// The transformer ops: embedding (duplicate indices summed), the fused layer_norm, gelu and
// scaled_dot_product_attention against their reference compositions (values and gradients) and
// against finite differences in float64, masked_fill and tril, softmax over the last dim of a 4-D
// tensor, and batched matmul over (B, H, T, d) head views that cannot be flattened without a copy.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autograd/detail/reference_ops.h"
#include "minitrain.h"
#include "tensor/caching_allocator.h"
#include "tests/autograd/same_values_and_gradients.h"

using namespace mt;
using mt::test::check_same;
using mt::test::max_abs_diff;

namespace {
Generator gen(31337);

Tensor input(const Shape& s, double lo = -1.0, double hi = 1.0, DType dtype = kFloat64) {
  Tensor t = rand(s, gen, {.dtype = dtype}) * (hi - lo) + lo;
  return t.detach().requires_grad_();
}

using V = const std::vector<Tensor>&;
void check_grad(const std::function<Tensor(V)>& f, std::vector<Tensor> inputs, GradcheckOptions opts = {}) {
  const GradcheckResult r = gradcheck(f, inputs, opts);
  INFO(r.message);
  CHECK(r.ok);
}
}  // namespace

TEST_CASE("embedding: rows by index, and a repeated index gets the sum of its rows' gradients") {
  const Tensor weight = from_vector(std::vector<double>{0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}).requires_grad_();
  const Tensor idx = from_vector(std::vector<int64_t>{1, 3, 1, 1, 0, 1}, {2, 3});
  const Tensor out = embedding(weight, idx);  // (2, 3, 2)
  CHECK(out.sizes() == Shape{2, 3, 2});
  CHECK(out.to_vector<double>() == std::vector<double>{10, 11, 30, 31, 10, 11, 10, 11, 0, 1, 10, 11});
  const Tensor g = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  out.backward(g);
  // row 1 is used at positions 0, 2, 3, 5: (1+5+7+11, 2+6+8+12); row 3 at 1; row 0 at 4; row 2 never.
  CHECK(weight.grad().to_vector<double>() == std::vector<double>{9, 10, 24, 28, 0, 0, 3, 4});
  check_grad([&](V x) { return embedding(x[0], idx); }, {input({4, 3})});
}

TEST_CASE("embedding: bad indices are one clear error") {
  const Tensor weight = zeros({4, 2});
  CHECK_THROWS_WITH_AS(embedding(weight, from_vector(std::vector<int64_t>{0, 4}, {2})),
                       doctest::Contains("out of range for a dim of size 4"), Error);
  CHECK_THROWS_WITH_AS(embedding(weight, zeros({2})), doctest::Contains("indices must be int64"), Error);
}

TEST_CASE("layer_norm: fused equals the composition, values and gradients") {
  const Tensor x = input({3, 5, 8}, -3, 3), w = input({8}), b = input({8});
  const auto fused = [](V v) { return layer_norm(v[0], v[1], v[2]); };
  const auto ref = [](V v) { return reference::layer_norm(v[0], v[1], v[2]); };
  check_same(fused, ref, {x, w, b}, 1e-12, gen);
  check_grad(fused, {x, w, b});
  // A non-contiguous input (transposed) and a large mean: the two-pass variance keeps the digits.
  check_same(fused, ref, {input({8, 6}, 1000, 1001).transpose(0, 1), w, b}, 1e-9, gen);
  check_grad([](V v) { return layer_norm(v[0].transpose(0, 1), v[1], v[2], 1e-3); }, {input({8, 4}), w, b});
  // float32, a model-sized row
  check_same(fused, ref, {input({4, 128}, -2, 2, kFloat32), input({128}, -1, 1, kFloat32), input({128}, -1, 1, kFloat32)},
             2e-5, gen);
}

TEST_CASE("layer_norm: normalises each row to mean 0, variance 1 before the affine part") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, -1, -1, 1, 1}, {2, 4});
  const Tensor y = layer_norm(x, ones({4}, {.dtype = kFloat64}), zeros({4}, {.dtype = kFloat64}), 0.0);
  const double s = 1.0 / std::sqrt(1.25);  // row 0: mean 2.5, variance (2.25+0.25)·2/4 = 1.25
  const std::vector<double> want = {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s, -1, -1, 1, 1};
  const std::vector<double> got = y.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-14));
  CHECK_THROWS_WITH_AS(layer_norm(x, ones({3}, {.dtype = kFloat64}), zeros({4}, {.dtype = kFloat64})),
                       doctest::Contains("weight [3] must be (4)"), Error);
}

TEST_CASE("layer_norm without weight or bias: no affine part, as F.layer_norm(x, shape)") {
  const Tensor x = input({3, 8}, -3, 3), w = input({8}), b = input({8});
  const Tensor one = ones({8}, {.dtype = kFloat64}), zero = zeros({8}, {.dtype = kFloat64});
  check_same([](V v) { return layer_norm(v[0], Tensor(), Tensor()); },
             [&](V v) { return reference::layer_norm(v[0], one, zero); }, {x}, 1e-12, gen);
  check_same([](V v) { return layer_norm(v[0], v[1], Tensor()); },
             [&](V v) { return reference::layer_norm(v[0], v[1], zero); }, {x, w}, 1e-12, gen);
  check_same([](V v) { return layer_norm(v[0], Tensor(), v[1]); },
             [&](V v) { return reference::layer_norm(v[0], one, v[1]); }, {x, b}, 1e-12, gen);
  check_grad([](V v) { return layer_norm(v[0], Tensor(), Tensor()); }, {x});
}

TEST_CASE("gelu: fused equals the composition in both forms, and gradcheck") {
  for (const GeluApproximate a : {GeluApproximate::None, GeluApproximate::Tanh}) {
    const auto fused = [a](V v) { return gelu(v[0], a); };
    check_same(fused, [a](V v) { return reference::gelu(v[0], a); }, {input({4, 7}, -5, 5)}, 1e-14, gen);
    check_grad(fused, {input({3, 5}, -4, 4)});
    check_same(fused, [a](V v) { return reference::gelu(v[0], a); }, {input({64}, -5, 5, kFloat32)}, 2e-6, gen);
  }
}

TEST_CASE("masked_fill and tril: values, and no gradient into filled places") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  CHECK(tril(x).to_vector<double>() == std::vector<double>{1, 0, 0, 4, 5, 0});
  CHECK(tril(x, 1).to_vector<double>() == std::vector<double>{1, 2, 0, 4, 5, 6});
  CHECK(tril(x, -1).to_vector<double>() == std::vector<double>{0, 0, 0, 4, 0, 0});
  const Tensor mask = from_vector(std::vector<int64_t>{0, 1, 0}, {3});  // broadcasts over rows
  const Tensor y = masked_fill(x, mask, -7);
  CHECK(y.to_vector<double>() == std::vector<double>{1, -7, 3, 4, -7, 6});
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 1, 1, 0, 1});
  check_grad([](V v) { return tril(v[0]); }, {input({2, 4, 4})});
  check_grad([&](V v) { return masked_fill(v[0], mask, 3.0); }, {input({2, 3})});
}

TEST_CASE("softmax over the last dim of a 4-D tensor, and batched matmul on head views") {
  check_grad([](V v) { return softmax(v[0], -1); }, {input({2, 3, 4, 5})});
  check_grad([](V v) { return log_softmax(v[0], 3); }, {input({2, 2, 3, 4})});
  // (B, T, 2, H, d) -> q, k: (B, H, T, d) views whose B and H strides do not merge.
  const int64_t B = 2, T = 5, H = 3, d = 4;
  const Tensor qk = input({B, T, 2, H, d});
  const Tensor q = qk.narrow(2, 0, 1).squeeze(2).permute({0, 2, 1, 3});
  const Tensor k = qk.narrow(2, 1, 1).squeeze(2).permute({0, 2, 1, 3});
  const Tensor s = matmul(q, k.transpose(-1, -2));  // (B, H, T, T)
  CHECK(max_abs_diff(s, matmul(q.contiguous(), k.contiguous().transpose(-1, -2))) <= 1e-14);
  check_grad([](V v) {
    const Tensor a = v[0].permute({0, 2, 1, 3}), b = v[1].permute({0, 2, 3, 1});  // (B, H, T, d), (B, H, d, T)
    return matmul(a, b);
  }, {input({B, T, H, d}), input({B, T, H, d})});
  // A batch dim broadcast (stride 0) against a real one.
  check_grad([](V v) { return matmul(v[0], v[1]); }, {input({2, 1, 3, 4}), input({1, 3, 4, 2})});
}

TEST_CASE("scaled_dot_product_attention: fused equals the composition, values and gradients") {
  for (const bool causal : {false, true}) {
    INFO("causal ", causal);
    const auto fused = [causal](V v) { return scaled_dot_product_attention(v[0], v[1], v[2], {.causal = causal}); };
    const auto ref = [causal](V v) { return reference::scaled_dot_product_attention(v[0], v[1], v[2], {.causal = causal}); };
    check_same(fused, ref, {input({2, 3, 6, 4}, -2, 2), input({2, 3, 6, 4}, -2, 2), input({2, 3, 6, 4})}, 1e-13, gen);
    check_grad(fused, {input({1, 2, 5, 3}), input({1, 2, 5, 3}), input({1, 2, 5, 3})});
    check_same(fused, ref, {input({2, 2, 16, 8}, -2, 2, kFloat32), input({2, 2, 16, 8}, -2, 2, kFloat32),
                            input({2, 2, 16, 8}, -1, 1, kFloat32)}, 1e-5, gen);
  }
  // Fewer queries than keys, and an explicit scale.
  const AttentionOptions o{.causal = true, .scale = 0.3};
  check_same([&](V v) { return scaled_dot_product_attention(v[0], v[1], v[2], o); },
             [&](V v) { return reference::scaled_dot_product_attention(v[0], v[1], v[2], o); },
             {input({1, 2, 3, 4}), input({1, 2, 7, 4}), input({1, 2, 7, 4})}, 1e-13, gen);
  // More queries than keys (rows past the last key see every key), over several causal row blocks.
  check_same([&](V v) { return scaled_dot_product_attention(v[0], v[1], v[2], o); },
             [&](V v) { return reference::scaled_dot_product_attention(v[0], v[1], v[2], o); },
             {input({1, 1, 40, 4}), input({1, 1, 21, 4}), input({1, 1, 21, 4})}, 1e-13, gen);
  check_same([](V v) { return scaled_dot_product_attention(v[0], v[1], v[2], {.causal = true}); },
             [](V v) { return reference::scaled_dot_product_attention(v[0], v[1], v[2], {.causal = true}); },
             {input({2, 2, 37, 8}), input({2, 2, 37, 8}), input({2, 2, 37, 8})}, 1e-13, gen);
  check_grad([&](V v) { return scaled_dot_product_attention(v[0], v[1], v[2], {.scale = 0.7}); },
             {input({2, 1, 3, 2}), input({2, 1, 4, 2}), input({2, 1, 4, 2})});
}

TEST_CASE("split of a fused qkv: one node, one gradient buffer, equal to separate narrow views' (Note [One gradient for split pieces])") {
  const Tensor qkv = input({2, 3, 12});
  const auto pieces = split(qkv, 4, 2);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].grad_fn()->name() == "SplitBackward");
  CHECK(pieces[0].grad_fn() == pieces[2].grad_fn());
  // The previous path (a slice backward per piece, the engine summing) is the reference: every
  // element is one piece's gradient plus zeros, so the two agree exactly. q used twice, v unused.
  const auto combine = [](const Tensor& q, const Tensor& k, const Tensor& v, bool use_v) {
    const Tensor y = q * k + q.exp();
    return use_v ? y + v * v : y;
  };
  for (const bool use_v : {true, false}) {
    INFO("v used: ", use_v);
    check_same([&](V x) { const auto p = split(x[0], 4, 2); return combine(p[0], p[1], p[2], use_v); },
               [&](V x) { return combine(x[0].narrow(2, 0, 4), x[0].narrow(2, 4, 4), x[0].narrow(2, 8, 4), use_v); },
               {qkv}, 0.0, gen);
    check_grad([&](V x) { const auto p = split(x[0], 4, 2); return combine(p[0], p[1], p[2], use_v); }, {qkv});
  }
}

TEST_CASE("scaled_dot_product_attention: reads the head views of a fused qkv projection in place") {
  const int64_t B = 2, T = 6, H = 2, d = 3;
  const auto heads = [&](const Tensor& qkv, int64_t part) {  // qkv: (B, T, 3·H·d) -> (B, H, T, d)
    return qkv.narrow(2, part * H * d, H * d).view({B, T, H, d}).transpose(1, 2);
  };
  const auto fused = [&](V v) {
    return scaled_dot_product_attention(heads(v[0], 0), heads(v[0], 1), heads(v[0], 2), {.causal = true});
  };
  const auto ref = [&](V v) {
    return reference::scaled_dot_product_attention(heads(v[0], 0), heads(v[0], 1), heads(v[0], 2), {.causal = true});
  };
  check_same(fused, ref, {input({B, T, 3 * H * d}, -2, 2)}, 1e-13, gen);
  check_grad(fused, {input({B, T, 3 * H * d})});
  // Row 0 of a causal attention sees key 0 only: its output is v_0.
  const Tensor qkv = input({B, T, 3 * H * d});
  const Tensor out = fused({qkv});
  CHECK(max_abs_diff(out.narrow(2, 0, 1), heads(qkv, 2).narrow(2, 0, 1)) <= 1e-15);
}

TEST_CASE("scaled_dot_product_attention: head size 1 from a transpose, whose last stride is not 1") {
  // q: (1, 1, 1, 4) -> (1, 1, 4, 1) with strides (4, 4, 1, 4): four queries of one element each.
  const auto fused = [](V v) {
    const Tensor q = v[0].transpose(2, 3);
    return scaled_dot_product_attention(q, q, q);
  };
  const auto ref = [](V v) {
    const Tensor q = v[0].transpose(2, 3);
    return reference::scaled_dot_product_attention(q, q, q);
  };
  check_same(fused, ref, {input({1, 1, 1, 4}, -2, 2)}, 1e-13, gen);
  check_grad(fused, {input({1, 1, 1, 4})});
}

TEST_CASE("scaled_dot_product_attention: bad shapes are one clear error") {
  const Tensor q = zeros({1, 2, 3, 4}), k = zeros({1, 2, 5, 4});
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, zeros({1, 2, 4, 3})),
                       doctest::Contains("and (1, 2, Tk, dv) for q [1, 2, 3, 4]"), Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(zeros({2, 3, 4}), k, k), doctest::Contains("must all be 4-D"), Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k.to(kFloat64), k), doctest::Contains("k is float64"), Error);
}

TEST_CASE("matmul and attention on head views allocate their results only, no copies of the operands") {
  // Every tensor here is >= 128 KiB, so each allocation goes through the CPU block cache and counts.
  const int64_t B = 2, T = 64, H = 4, d = 64;  // a (B, H, T, d) float64 view: 256 KiB
  const Tensor qkv = rand({B, T, 3, H, d}, gen, {.dtype = kFloat64});
  const auto part = [&](int64_t p) { return qkv.narrow(2, p, 1).squeeze(2).transpose(1, 2); };
  const Tensor q = part(0), k = part(1), v = part(2);
  REQUIRE_FALSE(q.is_contiguous());
  const auto allocations = [] { return cpu_cache_stats().allocations; };
  uint64_t before = allocations();
  const Tensor copy = q.contiguous();  // what a copy of an operand would cost: one more
  CHECK(allocations() - before == 1);
  before = allocations();
  const Tensor s = matmul(q, k.transpose(-1, -2));  // (B, H, T, T): the one allocation
  CHECK(allocations() - before == 1);
  before = allocations();
  const Tensor o = scaled_dot_product_attention(q, k, v, {.causal = true});  // out; lse is small
  CHECK(allocations() - before == 1);
  CHECK(max_abs_diff(s, matmul(q.contiguous(), k.contiguous().transpose(-1, -2))) <= 1e-13);
}
