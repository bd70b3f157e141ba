// Raw ops on known values: broadcasting, promotion, reductions, matmul, softmax, indexing, and the
// errors that name the op with its shapes and dtypes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "minitrain.h"
#include "tensor/cuda_info.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
Tensor f32(std::vector<float> v, Shape s) { return from_vector(v, s); }
Tensor i64(std::vector<int64_t> v, Shape s) { return from_vector(v, s); }
}  // namespace

TEST_CASE("binary ops broadcast like NumPy") {
  Tensor a = f32({1, 2, 3}, {3});        // (3)
  Tensor b = f32({10, 20}, {2, 1});      // (2, 1)
  Tensor c = a + b;                      // (2, 3)
  CHECK(c.sizes() == Shape{2, 3});
  CHECK(vals(c) == std::vector<double>{11, 12, 13, 21, 22, 23});
  CHECK(vals(b - a) == std::vector<double>{9, 8, 7, 19, 18, 17});
  CHECK(vals(a * a) == std::vector<double>{1, 4, 9});
  CHECK(vals(a / f32({2}, {1})) == std::vector<double>{0.5, 1, 1.5});
  CHECK(vals(maximum(a, f32({2}, {}))) == std::vector<double>{2, 2, 3});
  CHECK(vals(minimum(a, f32({2}, {}))) == std::vector<double>{1, 2, 2});
  CHECK(vals(gt(a, f32({2}, {}))) == std::vector<double>{0, 0, 1});
  CHECK(vals(eq(a, f32({2}, {}))) == std::vector<double>{0, 1, 0});
  CHECK(vals(le(a, f32({2}, {}))) == std::vector<double>{1, 1, 0});
  CHECK_THROWS_WITH_AS(f32({1, 2, 3}, {3}) + f32({1, 2}, {2}),
                       doctest::Contains("add: shapes [3] and [2] cannot be broadcast"), Error);
}

TEST_CASE("dtype promotion: int64 < float32 < float64") {
  Tensor i = i64({1, 2}, {2});
  Tensor f = f32({0.5f, 0.5f}, {2});
  Tensor d = from_vector(std::vector<double>{0.25, 0.25}, {2});
  CHECK((i + f).dtype() == kFloat32);
  CHECK((f + d).dtype() == kFloat64);
  CHECK((i * i).dtype() == kInt64);
  CHECK(vals(i + f) == std::vector<double>{1.5, 2.5});
  CHECK(vals(f.to(kInt64) + i) == std::vector<double>{1, 2});  // cast truncates toward zero
}

TEST_CASE("unary ops") {
  Tensor x = f32({-1, 0, 2}, {3});
  CHECK(vals(x.relu()) == std::vector<double>{0, 0, 2});
  CHECK(vals(x.abs()) == std::vector<double>{1, 0, 2});
  CHECK(vals(-x) == std::vector<double>{1, 0, -2});
  CHECK(vals(x.pow(2)) == std::vector<double>{1, 0, 4});
  CHECK(vals(x.exp())[2] == doctest::Approx(std::exp(2.0)));
  CHECK(vals(x.sigmoid())[1] == doctest::Approx(0.5));
  CHECK(vals(x.tanh())[0] == doctest::Approx(std::tanh(-1.0)));
  CHECK(vals(f32({4}, {1}).sqrt())[0] == 2);
  CHECK(vals(f32({1}, {1}).log())[0] == 0);
  CHECK(vals(erf(f32({0.5f}, {1})))[0] == doctest::Approx(std::erf(0.5)));
  CHECK_THROWS_WITH_AS(i64({1}, {1}).exp(), doctest::Contains("exp"), Error);
}

TEST_CASE("reductions over dims with keepdim") {
  Tensor x = f32({1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(vals(x.sum()) == std::vector<double>{21});
  CHECK(vals(x.sum({0})) == std::vector<double>{5, 7, 9});
  CHECK(vals(x.sum({1})) == std::vector<double>{9, 12});
  CHECK(x.sum({1}, true).sizes() == Shape{2, 1});
  CHECK(x.sum({0, 1}).sizes() == Shape{});
  CHECK(vals(x.mean({1})) == std::vector<double>{3, 4});
  CHECK(vals(x.max()) == std::vector<double>{6});
  CHECK(vals(x.amax({1})) == std::vector<double>{5, 6});
  CHECK(vals(x.amin({0})) == std::vector<double>{1, 2, 3});
  CHECK(vals(x.argmax(1)) == std::vector<double>{1, 2});
  CHECK(x.argmax(0).dtype() == kInt64);
  CHECK(vals(x.argmax(0)) == std::vector<double>{1, 0, 1});
  // A middle dim of a 3-D tensor.
  Tensor y = arange(0.0, 24.0, 1.0).view({2, 3, 4});
  CHECK(vals(y.sum({1})) == std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
  // Reducing a transposed (non-contiguous) view.
  CHECK(vals(x.t().sum({1})) == std::vector<double>{5, 7, 9});
  CHECK(vals(raw::sum_to(x, {1, 3})) == std::vector<double>{5, 7, 9});
  CHECK(vals(raw::sum_to(x, {3})) == std::vector<double>{5, 7, 9});
  CHECK(std::isnan(vals(f32({1, NAN, 3}, {3}).max())[0]));
}

// The values PyTorch 1.13 gives for the same x (torch.max(x, 1), torch.min(x, 1), .backward()).
TEST_CASE("max(dim) and min(dim) return (values, indices) for structured bindings, as libtorch") {
  const Tensor x = from_vector(std::vector<double>{1, 3, 3, NAN, 2, NAN, 5, -1, -1}, {3, 3}).requires_grad_();
  auto [v, i] = x.max(1);
  CHECK(vals(i) == std::vector<double>{1, 0, 0});  // the first on ties, the first NaN
  CHECK(vals(v)[0] == 3);
  CHECK(std::isnan(vals(v)[1]));
  CHECK(vals(v)[2] == 5);
  v.sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 1, 0, 1, 0, 0, 1, 0, 0});  // to the index only
  x.set_grad(Tensor());
  auto [lo, at] = x.min(1, /*keepdim=*/true);
  CHECK(lo.sizes() == Shape{3, 1});
  CHECK(vals(at) == std::vector<double>{0, 0, 1});
  lo.sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{1, 0, 0, 1, 0, 0, 0, 1, 0});
  // amax is the values-only reduction; its gradient shares dy among the ties.
  const Tensor y = from_vector(std::vector<double>{1, 3, 3}, {1, 3}).requires_grad_();
  y.amax({1}).sum().backward();
  CHECK(vals(y.grad()) == std::vector<double>{0, 0.5, 0.5});
  // int64, including the one value whose negation overflows.
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  const auto [ilo, iat] = from_vector(std::vector<int64_t>{lowest, 5, 7, lowest + 1}, {2, 2}).min(1);
  CHECK(ilo.to_vector<int64_t>() == std::vector<int64_t>{lowest, lowest + 1});
  CHECK(iat.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(vals(f32({4, 9, 2, 9}, {2, 2}).argmin(0)) == std::vector<double>{1, 0});
  CHECK_THROWS_WITH_AS(x.max(2), doctest::Contains("dim"), Error);
  const auto [sv, si] = scalar_tensor(3.0).max(0);  // a 0-dim tensor takes dim 0 or -1, as in PyTorch
  CHECK(sv.sizes() == Shape{});
  CHECK(sv.item() == 3.0);
  CHECK(si.item() == 0.0);
}

TEST_CASE("matmul: 2-D, batched with broadcasting, vectors, transposed operands") {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f32({1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(vals(a.matmul(b)) == std::vector<double>{4, 5, 10, 11});
  CHECK(vals(a.matmul(a.t())) == std::vector<double>{14, 32, 32, 77});  // transposed operand
  CHECK(vals(a.t().matmul(a)) == std::vector<double>{17, 22, 27, 22, 29, 36, 27, 36, 45});
  Tensor v = f32({1, 1, 1}, {3});
  CHECK(vals(a.matmul(v)) == std::vector<double>{6, 15});
  CHECK(a.matmul(v).sizes() == Shape{2});
  CHECK(vals(v.matmul(b)) == std::vector<double>{2, 2});
  CHECK(v.matmul(v).sizes() == Shape{});
  // (2, 2, 3) @ (3, 2): the matrix broadcasts over the batch.
  Tensor batch = a.unsqueeze(0).expand({2, 2, 3}).contiguous();
  CHECK(vals(batch.matmul(b)) == std::vector<double>{4, 5, 10, 11, 4, 5, 10, 11});
  CHECK_THROWS_WITH_AS(a.matmul(a), doctest::Contains("matmul: inner dims differ: [2, 3] @ [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(a.matmul(b.to(kFloat64)), doctest::Contains("matmul: dtypes differ (float32 and float64)"),
                       Error);
}

TEST_CASE("transposed_matmul is matmul of the transpose, bit for bit, with no transpose view") {
  // linear's weight gradient dyᵀ·x; sizes past the BLAS cutoff, with an N == 1 and an M == 1 case.
  Generator gen(7);
  for (auto [k, m, n] : {std::tuple<int64_t, int64_t, int64_t>{128, 256, 784}, {32, 1, 10}, {32, 10, 1}, {5, 3, 4}}) {
    CAPTURE(m);
    const Tensor a = randn({k, m}, gen), b = randn({k, n}, gen);
    const Tensor fast = raw::transposed_matmul(a, b);
    CHECK(fast.sizes() == Shape{m, n});
    CHECK(fast.to_vector<float>() == raw::matmul(raw::transpose(a, 0, 1), b).to_vector<float>());
  }
  CHECK(vals(raw::transposed_matmul(f32({1, 2, 3, 4, 5, 6}, {3, 2}), f32({1, 0, 1}, {3, 1}))) ==
        std::vector<double>{6, 8});
  CHECK_THROWS_WITH_AS(raw::transposed_matmul(f32({1, 2}, {2, 1}), f32({1, 2, 3}, {3, 1})),
                       doctest::Contains("transposed_matmul: needs (K, M) and (K, N), got [2, 1] and [3, 1]"), Error);
}

TEST_CASE("linear fuses the bias into the GEMM") {
  Tensor x = f32({1, 2, 3, 4}, {2, 2});
  Tensor w = f32({1, 0, 1, 1, 0, 2}, {3, 2});
  Tensor b = f32({10, 20, 30}, {3});
  CHECK(vals(linear(x, w, b)) == std::vector<double>{11, 23, 34, 13, 27, 38});
  CHECK(vals(linear(x, w)) == std::vector<double>{1, 3, 4, 3, 7, 8});
  CHECK_THROWS_WITH_AS(linear(x, f32({1, 2, 3}, {1, 3})), doctest::Contains("linear: input [2, 2]"), Error);
}

TEST_CASE("softmax and log_softmax are stable and normalised along any dim") {
  Tensor x = f32({1000, 1001, 1002, -5, 0, 5}, {2, 3});
  const auto s = vals(x.softmax(1));
  CHECK(s[0] + s[1] + s[2] == doctest::Approx(1.0));
  CHECK(s[2] == doctest::Approx(std::exp(2.0) / (1 + std::exp(1.0) + std::exp(2.0))));
  const auto ls = vals(x.log_softmax(1));
  CHECK(ls[2] == doctest::Approx(std::log(s[2])).epsilon(1e-5));
  const auto s0 = vals(x.softmax(0));  // along dim 0: columns
  CHECK(s0[0] + s0[3] == doctest::Approx(1.0));
}

TEST_CASE("index_select and gather") {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(vals(x.index_select(0, i64({2, 0, 2}, {3}))) == std::vector<double>{5, 6, 1, 2, 5, 6});
  CHECK(vals(x.index_select(1, i64({1}, {1}))) == std::vector<double>{2, 4, 6});
  CHECK(vals(x.gather(1, i64({1, 0, 0}, {3, 1}))) == std::vector<double>{2, 3, 5});
  CHECK_THROWS_WITH_AS(x.index_select(0, i64({3}, {1})), doctest::Contains("index_select"), Error);
  CHECK_THROWS_WITH_AS(x.gather(1, i64({2, 0, 0}, {3, 1})), doctest::Contains("gather"), Error);
  CHECK_THROWS_WITH_AS(x.index_select(0, f32({0}, {1})), doctest::Contains("index must be int64"), Error);
}

TEST_CASE("where, copy_ and fill_") {
  Tensor c = f32({1, 0, 1}, {3});
  CHECK(vals(where(c, f32({1, 2, 3}, {3}), f32({9}, {}))) == std::vector<double>{1, 9, 3});
  Tensor d = zeros({2, 3});
  d.copy_(f32({1, 2, 3}, {3}));  // broadcasts
  CHECK(vals(d) == std::vector<double>{1, 2, 3, 1, 2, 3});
  const uint64_t v = d.version();
  d.fill_(4);
  CHECK(d.version() == v + 1);
  CHECK_THROWS_WITH_AS(d.copy_(f32({1, 2}, {2})), doctest::Contains("copy_"), Error);
}

TEST_CASE("factories and printing") {
  CHECK(vals(arange(0.0, 1.0, 0.25)) == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(5).dtype() == kInt64);
  CHECK(vals(full({2}, 3.5)) == std::vector<double>{3.5, 3.5});
  CHECK(zeros({0, 3}).numel() == 0);
  CHECK(f32({1.5f, 2}, {2}).str() == "tensor([1.5, 2], shape=[2], dtype=float32)");
  CHECK(i64({1, 2, 3, 4}, {2, 2}).str() == "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=int64)");
  CHECK(scalar_tensor(2).str() == "tensor(2, shape=[], dtype=float32)");
  CHECK_THROWS_WITH_AS(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), doctest::Contains("do not fill shape"), Error);
  CHECK_THROWS_WITH_AS(empty({-1}), doctest::Contains("negative size"), Error);
  // A byte count past 2^63 is refused rather than wrapped into a small block that the fill overruns
  // (2^62 float32 values are 2^64 bytes, which wrap to 0); a zero size still makes an empty tensor.
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 62}), doctest::Contains("would take more than 2^63 bytes"), Error);
  CHECK_THROWS_WITH_AS(zeros({int64_t{1} << 40, int64_t{1} << 40}),
                       doctest::Contains("[1099511627776, 1099511627776]"), Error);
  CHECK(empty({int64_t{1} << 62, 0}).numel() == 0);
  CHECK_THROWS_WITH_AS(zeros({2}).item(), doctest::Contains("one element"), Error);
  CHECK_THROWS_WITH_AS(Device("gpu:0"), doctest::Contains("unknown device 'gpu:0'"), Error);
  if (!cuda_is_built())  // with the backend: see test_cuda_host_math.cpp and tests/cuda/
    CHECK_THROWS_WITH_AS(zeros({1}, {.device = cuda_device(0)}), doctest::Contains("no CUDA backend"), Error);
}

TEST_CASE("random numbers depend only on the seed") {
  Generator g1(7), g2(7), g3(8);
  Tensor a = randn({1000}, g1), b = randn({1000}, g2), c = randn({1000}, g3);
  CHECK(vals(a) == vals(b));
  CHECK(vals(a) != vals(c));
  const double mean = a.mean().item(), var = (a - mean).pow(2).mean().item();
  CHECK(std::abs(mean) < 0.1);
  CHECK(var == doctest::Approx(1.0).epsilon(0.1));
  Tensor u = rand({1000}, g1);
  CHECK(u.max().item() < 1.0);
  CHECK((-u).max().item() <= 0.0);
}
