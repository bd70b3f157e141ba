// The CPU backend, method by method, called directly through mt::backend(kCPU) with the layouts
// raw_ops hands it: contiguous, transposed, broadcast (stride 0) and strided views. Expected values
// come from small hand computations or from naive loops written out here.
#include <doctest/doctest.h>

#include <tuple>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/caching_allocator.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cuda_info.h"
#include "tensor/generator.h"
#include "tensor/parallel.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

Backend& be() { return backend(kCPU); }
Tensor f32(std::vector<float> v, Shape s) { return from_vector(v, s); }
Tensor f64(std::vector<double> v, Shape s) { return from_vector(v, s); }
Tensor i64(std::vector<int64_t> v, Shape s) { return from_vector(v, s); }
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor randn(Shape s, uint64_t seed, DType dtype = kFloat32) {
  Generator gen(seed);
  Tensor t = empty(s, {.dtype = dtype});
  raw::normal_(t, gen);
  return t;
}

// 0, 1, 2, ... in the given shape.
Tensor iota(Shape s, DType dtype = kFloat32) {
  return raw::cast(raw::reshape(arange(s.numel()), s), dtype);
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("strided_loop merges dims contiguous for every tensor and drops size-1 dims") {
  const Shape sizes{2, 3, 4};
  const Shape dense = contiguous_strides(sizes);
  auto s = cpu::simplify_loop<2>(sizes, {dense.begin(), dense.begin()});
  CHECK(s.ndim == 1);
  CHECK(s.sizes[0] == 24);

  // out (4, 1, 5) + bias expanded from (5): the bias repeats, so the dims stay apart.
  const Shape bias_sizes{4, 1, 5}, out_strides{5, 5, 1}, bias_strides{0, 0, 1};
  s = cpu::simplify_loop<2>(bias_sizes, {out_strides.begin(), bias_strides.begin()});
  CHECK(s.ndim == 2);
  CHECK(s.sizes[0] == 5);
  CHECK(s.sizes[1] == 4);
  CHECK(s.strides[1][1] == 0);

  // Every element is visited once, in row-major order of the loop shape.
  Tensor t = raw::transpose(iota({3, 2}), 0, 1);  // (2, 3) with strides (1, 2)
  std::vector<float> seen;
  cpu::strided_loop(
      t.sizes(),
      [&](int64_t n, const std::array<int64_t, 1>& st, const float* p) {
        for (int64_t i = 0; i < n; ++i) seen.push_back(p[i * st[0]]);
      },
      cpu::operand<const float>(t));
  CHECK(seen == std::vector<float>{0, 2, 4, 1, 3, 5});
}

TEST_CASE("copy casts dtypes and reads and writes strided views") {
  Tensor src = raw::transpose(iota({3, 2}), 0, 1);  // [[0, 2, 4], [1, 3, 5]]
  Tensor dst = empty({2, 3});
  be().copy(dst, src);
  CHECK(vals(dst) == std::vector<double>{0, 2, 4, 1, 3, 5});

  Tensor ints = empty({3}, {.dtype = kInt64});
  be().copy(ints, f32({1.7f, -1.7f, 2.0f}, {3}));  // truncates toward zero
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2});

  Tensor base = zeros({3, 2}, {.dtype = kFloat64});
  be().copy(raw::transpose(base, 0, 1), i64({1, 2, 3, 4, 5, 6}, {2, 3}));  // write through a view
  CHECK(vals(base) == std::vector<double>{1, 4, 2, 5, 3, 6});

  be().fill(raw::narrow(base, 1, 1, 1), -1.0);  // the second column
  CHECK(vals(base) == std::vector<double>{1, -1, 2, -1, 3, -1});
}

TEST_CASE("unary ops on known values") {
  Tensor x = f32({-2, -0.5f, 0, 1.5f}, {4});
  auto run = [&](UnaryOp op, const Tensor& in, double s = 0) {
    Tensor out = empty(in.sizes(), {.dtype = in.dtype()});
    be().unary(op, out, in, s);
    return vals(out);
  };
  CHECK(run(UnaryOp::Neg, x) == std::vector<double>{2, 0.5, 0, -1.5});
  CHECK(run(UnaryOp::Relu, x) == std::vector<double>{0, 0, 0, 1.5});
  CHECK(run(UnaryOp::Abs, x) == std::vector<double>{2, 0.5, 0, 1.5});
  CHECK(run(UnaryOp::Sign, x) == std::vector<double>{-1, -1, 0, 1});
  CHECK(run(UnaryOp::Pow, x, 2) == std::vector<double>{4, 0.25, 0, 2.25});
  CHECK(run(UnaryOp::Pow, x, 3) == std::vector<double>{-8, -0.125, 0, 3.375});
  CHECK(run(UnaryOp::AddScalar, x, 1) == std::vector<double>{-1, 0.5, 1, 2.5});
  CHECK(run(UnaryOp::MulScalar, x, -2) == std::vector<double>{4, 1, 0, -3});
  for (auto [op, f] : {std::pair<UnaryOp, double (*)(double)>{UnaryOp::Exp, std::exp},
                       {UnaryOp::Tanh, std::tanh},
                       {UnaryOp::Erf, std::erf},
                       {UnaryOp::Expm1, std::expm1},
                       {UnaryOp::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }}}) {
    const std::vector<double> got = run(op, x);
    for (int i = 0; i < 4; ++i) CHECK(got[i] == doctest::Approx(f(vals(x)[i])).epsilon(1e-6));
  }
  Tensor pos = f64({0.25, 4}, {2});
  CHECK(run(UnaryOp::Sqrt, pos) == std::vector<double>{0.5, 2});
  CHECK(run(UnaryOp::Pow, pos, 0.5) == std::vector<double>{0.5, 2});
  CHECK(run(UnaryOp::Log, pos)[1] == doctest::Approx(std::log(4.0)));
  CHECK(run(UnaryOp::Log1p, pos)[1] == doctest::Approx(std::log1p(4.0)));
  CHECK(std::isnan(run(UnaryOp::Relu, f32({kNaN}, {1}))[0]));  // NaN passes through, as in PyTorch

  Tensor ints = i64({-3, 0, 4}, {3});
  CHECK(run(UnaryOp::Abs, ints) == std::vector<double>{3, 0, 4});
  CHECK(run(UnaryOp::Pow, ints, 2) == std::vector<double>{9, 0, 16});
  CHECK(run(UnaryOp::MulScalar, ints, 3) == std::vector<double>{-9, 0, 12});
  CHECK_THROWS_WITH_AS(run(UnaryOp::Exp, ints), doctest::Contains("exp: needs a floating dtype, got int64"),
                       Error);

  // In place (out aliases in) and on a transposed input.
  Tensor y = iota({2, 3});
  be().unary(UnaryOp::MulScalar, y, y, 10);
  CHECK(vals(y) == std::vector<double>{0, 10, 20, 30, 40, 50});
  Tensor out = empty({3, 2});
  be().unary(UnaryOp::Neg, out, raw::transpose(y, 0, 1), 0);
  CHECK(vals(out) == std::vector<double>{0, -30, -10, -40, -20, -50});
}

TEST_CASE("binary ops agree with a naive loop for every operand layout") {
  auto naive = [](BinaryOp op, float x, float y) -> float {
    switch (op) {
      case BinaryOp::Add: return x + y;
      case BinaryOp::Sub: return x - y;
      case BinaryOp::Mul: return x * y;
      case BinaryOp::Div: return x / y;
      case BinaryOp::Maximum: return std::max(x, y);
      case BinaryOp::Minimum: return std::min(x, y);
      case BinaryOp::Eq: return x == y;
      case BinaryOp::Ne: return x != y;
      case BinaryOp::Lt: return x < y;
      case BinaryOp::Le: return x <= y;
      case BinaryOp::Gt: return x > y;
      case BinaryOp::Ge: return x >= y;
    }
    return 0;
  };
  // a: -4.5, -4, ..., 5; b: small integers, never 0. Some elements are equal (for the comparisons);
  // a's one 0 only appears as a divisor when swapped, giving the same ±inf on both sides.
  Tensor a = raw::unary(UnaryOp::AddScalar, raw::unary(UnaryOp::MulScalar, iota({4, 5}), 0.5), -4.5);
  Tensor b_full = f32({3, 1, -2, 2, -1, 1, 2, 3, -3, 2, 1, -1, 2, 3, 1, -2, 1, 2, 3, -1}, {4, 5});
  const std::vector<std::pair<const char*, Tensor>> layouts = {
      {"contiguous", b_full},
      {"scalar (stride 0)", raw::expand(f32({2}, {}), {4, 5})},
      {"row (1, 5)", raw::expand(f32({1, -2, 3, 2, -1}, {1, 5}), {4, 5})},
      {"column (4, 1)", raw::expand(f32({2, -1, 3, 1}, {4, 1}), {4, 5})},
      {"transposed", raw::transpose(raw::contiguous(raw::transpose(b_full, 0, 1)), 0, 1)},
  };
  for (const auto& layout : layouts) {
    const char* name = layout.first;
    const Tensor& b = layout.second;
    for (int o = 0; o <= static_cast<int>(BinaryOp::Ge); ++o) {
      const auto op = static_cast<BinaryOp>(o);
      const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
      for (bool swap : {false, true}) {  // the broadcast operand on either side
        const Tensor& x = swap ? b : a;
        const Tensor& y = swap ? a : b;
        for (bool strided_out : {false, true}) {
          Tensor out = strided_out ? raw::transpose(empty({5, 4}), 0, 1) : empty({4, 5});
          be().binary(op, out, x, y);
          const std::vector<float> got = out.to_vector<float>();
          for (int i = 0; i < 20; ++i) {
            CAPTURE(name);
            CAPTURE(op_name(op));
            CAPTURE(i);
            CHECK(got[i] == naive(op, swap ? bv[i] : av[i], swap ? av[i] : bv[i]));
          }
        }
      }
    }
  }
}

TEST_CASE("binary ops in place, on int64, and with NaN") {
  Tensor x = iota({2, 3});
  be().binary(BinaryOp::Add, x, x, raw::expand(f32({10, 20, 30}, {3}), {2, 3}));  // x += bias
  CHECK(vals(x) == std::vector<double>{10, 21, 32, 13, 24, 35});

  Tensor q = empty({3}, {.dtype = kInt64});
  be().binary(BinaryOp::Div, q, i64({7, -7, 6}, {3}), i64({2, 2, 3}, {3}));
  CHECK(q.to_vector<int64_t>() == std::vector<int64_t>{3, -3, 2});  // truncation
  CHECK_THROWS_WITH_AS(be().binary(BinaryOp::Div, q, i64({1, 2, 3}, {3}), i64({1, 0, 1}, {3})),
                       doctest::Contains("integer division by zero"), Error);

  Tensor m = empty({3});
  be().binary(BinaryOp::Maximum, m, f32({kNaN, 1, 5}, {3}), f32({1, kNaN, 2}, {3}));
  CHECK(std::isnan(vals(m)[0]));
  CHECK(std::isnan(vals(m)[1]));
  CHECK(vals(m)[2] == 5);
  be().binary(BinaryOp::Minimum, m, f32({kNaN, 1, 5}, {3}), f32({1, kNaN, 2}, {3}));
  CHECK(std::isnan(vals(m)[0]));
  CHECK(std::isnan(vals(m)[1]));
  CHECK(vals(m)[2] == 2);
}

TEST_CASE("where takes a condition of any dtype, broadcast") {
  Tensor out = empty({2, 3});
  Tensor cond = raw::expand(f32({1, 0, 1}, {3}), {2, 3});
  be().where(out, cond, iota({2, 3}), raw::expand(f32({-1}, {}), {2, 3}));
  CHECK(vals(out) == std::vector<double>{0, -1, 2, 3, -1, 5});
  be().where(out, raw::expand(i64({0, 1}, {2, 1}), {2, 3}), iota({2, 3}), raw::transpose(iota({3, 2}), 0, 1));
  CHECK(vals(out) == std::vector<double>{0, 2, 4, 3, 4, 5});
}

TEST_CASE("reductions over leading, trailing, middle and non-adjacent dims, contiguous or not") {
  // Naive reference: every element of x (2, 3, 4) goes to the out slot with reduced coords zeroed.
  const Shape sizes{2, 3, 4};
  auto expected = [&](ReductionOp op, const std::vector<double>& x, uint32_t mask) {
    std::vector<double> out;
    std::vector<bool> started;
    Shape out_sizes = sizes;
    for (int d = 0; d < 3; ++d)
      if ((mask >> d) & 1) out_sizes[d] = 1;
    out.assign(out_sizes.numel(), 0);
    started.assign(out.size(), false);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k) {
          const int64_t c[3] = {i, j, k};
          int64_t slot = 0;
          for (int d = 0; d < 3; ++d) slot = slot * out_sizes[d] + ((mask >> d) & 1 ? 0 : c[d]);
          const double v = x[(i * 3 + j) * 4 + k];
          if (!started[slot]) out[slot] = op == ReductionOp::Sum ? 0 : v;
          started[slot] = true;
          if (op == ReductionOp::Sum) out[slot] += v;
          if (op == ReductionOp::Max) out[slot] = std::max(out[slot], v);
          if (op == ReductionOp::Min) out[slot] = std::min(out[slot], v);
        }
    return std::make_pair(out, out_sizes);
  };
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    // Values in a scrambled order, so maxima and minima sit at different places in each slice.
    std::vector<double> scrambled(24);
    for (int i = 0; i < 24; ++i) scrambled[i] = (i * 7) % 11 - 5;
    Tensor base = raw::cast(f64(scrambled, {2, 3, 4}), dtype);
    // The same values stored as a permuted (non-contiguous) view.
    Tensor permuted = raw::permute(raw::contiguous(raw::permute(base, {2, 0, 1})), {1, 2, 0});
    REQUIRE(!cpu::is_contiguous(permuted));
    for (const Tensor& x : {base, permuted}) {
      const std::vector<double> xv = vals(x);
      for (ReductionOp op : {ReductionOp::Sum, ReductionOp::Max, ReductionOp::Min}) {
        for (uint32_t mask = 1; mask < 8; ++mask) {
          const auto [want, out_sizes] = expected(op, xv, mask);
          Tensor out = empty(out_sizes, {.dtype = dtype});
          be().reduce(op, out, x, mask);
          CAPTURE(dtype);
          CAPTURE(op_name(op));
          CAPTURE(mask);
          CHECK(vals(out) == want);
        }
      }
    }
  }
}

TEST_CASE("argmax picks the first maximum, or the first NaN") {
  Tensor x = f32({1, 5, 5, 0, 7, 2, 7, 1}, {2, 4});
  Tensor rows = empty({2, 1}, {.dtype = kInt64});
  be().reduce(ReductionOp::ArgMax, rows, x, 0b10);
  CHECK(rows.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  Tensor cols = empty({1, 4}, {.dtype = kInt64});
  be().reduce(ReductionOp::ArgMax, cols, x, 0b01);
  CHECK(cols.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 1});
  be().reduce(ReductionOp::ArgMax, cols, raw::transpose(raw::contiguous(raw::transpose(x, 0, 1)), 0, 1), 0b01);  // strided
  CHECK(cols.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 1});

  Tensor with_nan = f32({1, kNaN, 9, kNaN}, {1, 4});
  Tensor arg = empty({1, 1}, {.dtype = kInt64});
  be().reduce(ReductionOp::ArgMax, arg, with_nan, 0b10);
  CHECK(arg.to_vector<int64_t>() == std::vector<int64_t>{1});
  Tensor mx = empty({1, 1});
  be().reduce(ReductionOp::Max, mx, with_nan, 0b10);
  CHECK(std::isnan(mx.item()));
  be().reduce(ReductionOp::Min, mx, f32({1, 2, kNaN, 0}, {1, 4}), 0b10);
  CHECK(std::isnan(mx.item()));
}

TEST_CASE("reducing an empty dim: sum is 0, max is an error") {
  Tensor x = empty({3, 0});
  Tensor out = empty({3, 1});
  be().reduce(ReductionOp::Sum, out, x, 0b10);
  CHECK(vals(out) == std::vector<double>{0, 0, 0});
  CHECK_THROWS_WITH_AS(be().reduce(ReductionOp::Max, out, x, 0b10), doctest::Contains("max: cannot reduce"), Error);
}

TEST_CASE("float32 sums are pairwise: long rows and columns stay accurate") {
  // 0.1f added 2^22 times one by one in float32 drifts far from the true sum (4% low here);
  // pairwise summation keeps it within a few ulps.
  const int64_t n = int64_t{1} << 22;
  const double truth = static_cast<double>(0.1f) * n;
  Tensor row = full({n}, 0.1);
  Tensor total = empty({1});
  be().reduce(ReductionOp::Sum, total, row, 0b1);
  CHECK(total.item() == doctest::Approx(truth).epsilon(1e-6));

  Tensor cols = full({n / 4, 4}, 0.1);
  Tensor col_sums = empty({1, 4});
  be().reduce(ReductionOp::Sum, col_sums, cols, 0b01);
  for (double v : vals(col_sums)) CHECK(v == doctest::Approx(truth / 4).epsilon(1e-6));
}

TEST_CASE("gemm on known values: transposed operands, a shared matrix, accumulate") {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {1, 2, 3});    // (1, 2, 3)
  Tensor b = f32({1, 0, 0, 1, 1, 1}, {1, 3, 2});    // (1, 3, 2)
  Tensor out = empty({1, 2, 2});
  be().gemm(out, a, b, false);
  CHECK(vals(out) == std::vector<double>{4, 5, 10, 11});
  be().gemm(out, a, b, true);  // out += a·b
  CHECK(vals(out) == std::vector<double>{8, 10, 20, 22});

  // a given as the transpose of a (3, 2) matrix (column-major), b shared by two batch entries.
  Tensor at = raw::transpose(f32({1, 4, 2, 5, 3, 6}, {1, 3, 2}), 1, 2);
  Tensor shared = raw::expand(b, {2, 3, 2});
  Tensor a2 = raw::expand(at, {2, 2, 3});
  Tensor out2 = empty({2, 2, 2});
  be().gemm(out2, a2, shared, false);
  CHECK(vals(out2) == std::vector<double>{4, 5, 10, 11, 4, 5, 10, 11});

  Tensor ai = i64({1, 2, 3, 4}, {1, 2, 2});
  Tensor oi = empty({1, 2, 2}, {.dtype = kInt64});
  be().gemm(oi, ai, ai, false);
  CHECK(oi.to_vector<int64_t>() == std::vector<int64_t>{7, 10, 15, 22});
}

TEST_CASE("the BLAS/Eigen GEMM and the matrix-vector loops agree with the reference loops") {
  // (33, 47, 29) is past the small-problem cutoff (BLAS); N = 1 and M = 1 take the gemv loops.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{33, 47, 29}, {33, 47, 1}, {1, 47, 29}, {32, 10, 1}})
  for (DType dtype : {kFloat32, kFloat64}) {
    const int64_t batch = 2;
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        for (bool accumulate : {false, true}) {
          // A transposed operand is the transpose of a contiguous (k, m) or (n, k) tensor; b is one
          // matrix shared by the batch (batch stride 0), as matmul passes a 2-D right operand.
          Tensor a = trans_a ? raw::transpose(randn({batch, k, m}, 1, dtype), 1, 2) : randn({batch, m, k}, 1, dtype);
          Tensor b1 = trans_b ? raw::transpose(randn({1, n, k}, 2, dtype), 1, 2) : randn({1, k, n}, 2, dtype);
          Tensor b = raw::expand(b1, {batch, k, n});
          Tensor init = randn({batch, m, n}, 3, dtype);
          Tensor fast = raw::clone(init), reference = raw::clone(init);
          be().gemm(fast, a, b, accumulate);
          cpu::gemm_reference(reference, a, b, accumulate);
          const std::vector<double> f = vals(fast), r = vals(reference);
          const double tol = dtype == kFloat32 ? 1e-4 : 1e-12;
          double worst = 0;
          for (size_t i = 0; i < f.size(); ++i) worst = std::max(worst, std::abs(f[i] - r[i]));
          CAPTURE(dtype);
          CAPTURE(trans_a);
          CAPTURE(trans_b);
          CAPTURE(accumulate);
          CAPTURE(m);
          CAPTURE(n);
          CHECK(worst < tol);
        }
      }
    }
  }
}

TEST_CASE("softmax and log_softmax are stable for large inputs") {
  Tensor x = f32({1000, 1001, 1002, -1, 0, 1}, {2, 3});  // exp(1000) overflows float
  Tensor p = empty({2, 3}), lp = empty({2, 3});
  be().softmax(p, x, false);
  be().softmax(lp, x, true);
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  const std::vector<double> want = {1 / z, std::exp(1.0) / z, std::exp(2.0) / z};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i) {
      CHECK(vals(p)[r * 3 + i] == doctest::Approx(want[i]).epsilon(1e-6));
      CHECK(vals(lp)[r * 3 + i] == doctest::Approx(std::log(want[i])).epsilon(1e-6));
    }
  Tensor ints = i64({1, 2}, {2});
  CHECK_THROWS_WITH_AS(be().softmax(empty({2}, {.dtype = kInt64}), ints, false),
                       doctest::Contains("softmax: needs a floating dtype"), Error);
}

TEST_CASE("index_select and index_add: a whole dim, repeated indices accumulate") {
  Tensor table = iota({1, 4, 2});   // (outer 1, n 4, inner 2): rows [0,1] [2,3] [4,5] [6,7]
  Tensor index = i64({3, 0, 3}, {3});
  Tensor picked = empty({1, 3, 2});
  be().index_select(picked, table, index);
  CHECK(vals(picked) == std::vector<double>{6, 7, 0, 1, 6, 7});

  Tensor grad = zeros({1, 4, 2});
  be().index_add(grad, index, full({1, 3, 2}, 1.0));
  CHECK(vals(grad) == std::vector<double>{1, 1, 0, 0, 0, 0, 2, 2});
}

TEST_CASE("gather and scatter_add: one index per element") {
  Tensor logits = iota({2, 3, 1});               // (outer 2, n 3, inner 1)
  Tensor target = i64({2, 0}, {2, 1, 1});        // one class per sample
  Tensor picked = empty({2, 1, 1});
  be().gather(picked, logits, target);
  CHECK(vals(picked) == std::vector<double>{2, 3});

  Tensor grad = zeros({2, 3, 1});
  be().scatter_add(grad, i64({2, 2, 0, 1}, {2, 2, 1}), f32({1, 2, 3, 4}, {2, 2, 1}));
  CHECK(vals(grad) == std::vector<double>{0, 0, 3, 3, 4, 0});
}

// scatter_add_zeros zeroes each task's part of out just before adding into it (out starts
// uninitialised): the same bits as a zero fill and then scatter_add, for max pooling's layout
// (inner 1, 2048 planes), for column blocks narrower than a row (inner 300: blocks of 128), and for
// one source row (most of out stays zero).
TEST_CASE("scatter_add_zeros gives the bits of a zero fill and then scatter_add, at 1 and 2 threads") {
  struct Case {
    int64_t outer, n, k, inner;
  };
  for (const Case c : {Case{2048, 784, 196, 1}, Case{3, 50, 40, 300}, Case{2, 7, 1, 5}}) {
    Tensor position = empty({c.outer, c.k, c.inner});
    Generator gen(1);
    raw::uniform_(position, gen, 0.0, static_cast<double>(c.n) - 0.01);
    const Tensor index = raw::cast(position, kInt64);  // in [0, n), many repeated
    const Tensor src = randn({c.outer, c.k, c.inner}, 2);
    Tensor want = zeros({c.outer, c.n, c.inner});
    be().scatter_add(want, index, src);
    for (int threads : {1, 2}) {
      NumThreadsGuard guard(threads);
      CAPTURE(c.inner);
      CAPTURE(threads);
      Tensor got = full({c.outer, c.n, c.inner}, std::nan(""));  // whatever out held before
      be().scatter_add_zeros(got, index, src);
      CHECK(vals(got) == vals(want));
    }
  }
}

TEST_CASE("index kernels reject out-of-range indices, naming the index and the range") {
  Tensor table = iota({1, 3, 2});
  CHECK_THROWS_WITH_AS(be().index_select(empty({1, 2, 2}), table, i64({1, 5}, {2})),
                       doctest::Contains("index_select: index 5 at position 1 is out of range for a dim of size "
                                         "3 (valid range [0, 3))"),
                       Error);
  CHECK_THROWS_WITH_AS(be().index_add(zeros({1, 3, 2}), i64({-1}, {1}), empty({1, 1, 2})),
                       doctest::Contains("index_add: index -1"), Error);
  CHECK_THROWS_WITH_AS(be().gather(empty({1, 1, 2}), table, i64({0, 3}, {1, 1, 2})),
                       doctest::Contains("gather: index 3"), Error);
  CHECK_THROWS_WITH_AS(be().scatter_add(zeros({1, 3, 2}), i64({7, 0}, {1, 1, 2}), empty({1, 1, 2})),
                       doctest::Contains("scatter_add: index 7"), Error);
}

// The bounds check runs in chunks on the intra-op threads; with bad indices in two chunks, the
// error still names the first one, at any thread count.
TEST_CASE("a long index list with several bad indices: the error names the first, at 1 and 2 threads") {
  std::vector<int64_t> index(100000, 1);
  index[70000] = 9;
  index[40001] = -4;
  index[99999] = 3;
  for (int threads : {1, 2}) {
    NumThreadsGuard guard(threads);
    CAPTURE(threads);
    CHECK_THROWS_WITH_AS(be().scatter_add(zeros({1, 3, 1}), i64(index, {1, 100000, 1}), zeros({1, 100000, 1})),
                         doctest::Contains("scatter_add: index -4 at position 40001 is out of range"), Error);
  }
}

TEST_CASE("the backend table, op names and the allocator") {
  CHECK(&backend(kCPU) == &backend(Device("cpu")));
  try {
    backend(cuda_device(0));  // succeeds only in a build with the CUDA backend and a GPU
  } catch (const Error& e) {
    CHECK(std::string(e.what()).starts_with(cuda_is_built() ? "cuda:0 requested but no CUDA GPU is visible"
                                                            : "CUDA device requested but this build has no CUDA backend"));
  }
  CHECK(std::string(op_name(BinaryOp::Add)) == "add");
  CHECK(std::string(op_name(UnaryOp::Exp)) == "exp");
  CHECK(std::string(op_name(ReductionOp::Sum)) == "sum");

  Allocator& alloc = cpu_allocator();
  for (size_t nbytes : {size_t{0}, size_t{1}, size_t{64}, size_t{100}}) {
    void* p = alloc.allocate(nbytes);
    CHECK(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    alloc.deallocate(p, nbytes);
  }
}

TEST_CASE("the CPU allocator caches large blocks: a steady training loop maps no new memory") {
  // Note [Large CPU blocks are cached]: the sizes of the 784-256-10 MLP's weight, its gradient and a
  // batch of activations, allocated and freed as a training step does.
  auto step = [] {
    const Tensor w = empty({256, 784}), g = empty({256, 784}), act = empty({128, 784});
    CHECK(reinterpret_cast<uintptr_t>(w.raw_data()) % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(act.raw_data()) % 64 == 0);
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: the cache takes what it needs
  const CacheStats before = cpu_cache_stats();
  for (int i = 0; i < 20; ++i) step();
  const CacheStats after = cpu_cache_stats();
  CHECK(after.raw_allocations == before.raw_allocations);
  CHECK(after.allocations == before.allocations + 60);
  CHECK(after.cache_hits == before.cache_hits + 60);
  CHECK(after.bytes_in_use == before.bytes_in_use);
  // Small tensors do not go through the cache.
  { const Tensor small = empty({100}); }
  CHECK(cpu_cache_stats().allocations == after.allocations);
  CHECK(cpu_empty_cache() > 0);  // the free segments go back to the system
  CHECK(cpu_cache_stats().bytes_reserved < after.bytes_reserved);
}

TEST_CASE("small CPU tensors keep their bytes in the storage's own block, aligned and counted") {
  // Note [Small bytes inline]: up to 512 bytes the data lies just past the Storage object, after at
  // most 63 bytes of alignment; above that in a block of its own (which malloc may place anywhere).
  // Either way it is 64-byte aligned and counted in cpu_memory_stats().
  for (int64_t n : {0, 1, 16, 100, 128, 129, 1000}) {
    CAPTURE(n);
    const size_t nbytes = static_cast<size_t>(n) * sizeof(float);
    const size_t before = cpu_memory_stats().bytes_in_use;
    const char* storage = nullptr;
    uintptr_t data = 0;
    {
      Tensor t = empty({n});
      storage = reinterpret_cast<const char*>(t.storage().get());
      data = reinterpret_cast<uintptr_t>(t.raw_data());
      CHECK(data % 64 == 0);
      CHECK(cpu_memory_stats().bytes_in_use == before + nbytes);
      Tensor view = raw::reshape(t, Shape{1, n});  // a view holds the block, not a copy of the bytes
      t = Tensor();
      if (n > 0) {
        raw::fill_(view, 7.0);
        CHECK(view.to_vector<float>() == std::vector<float>(n, 7.0f));
      }
    }
    const auto past = static_cast<intptr_t>(data - reinterpret_cast<uintptr_t>(storage + sizeof(Storage)));
    if (nbytes <= 512) CHECK((past >= 0 && past < 64));
    CHECK(cpu_memory_stats().bytes_in_use == before);
  }
}
