// bfloat16 and float16 ops against PyTorch 1.13's CPU results (tests/nn/make_lowp_fixtures.py):
// elementwise ops bit for bit, reductions and GEMMs within one rounding, gradients in the tensors'
// own dtype; and the GEMM's bound on scratch memory.
//
// Note [Low-precision tolerances]: an elementwise op computes in float32 and rounds once, as
// PyTorch's CPU kernels do, so those results are PyTorch's bits exactly (float16, where PyTorch 1.13
// has no CPU kernel, against its float32 result rounded once). Two of PyTorch's kernels round more
// than once: pow with exponent 3 is (x·x)·x with x·x rounded to 16 bits (checked: 0 of 1,000
// bfloat16 values differ from that, 233 from x³ rounded once), and pow with -0.5 goes through its
// own rsqrt; minitrain rounds x³ and x^-0.5 once, and those two compare within one ulp.
// A sum (reduction, GEMM) is also rounded once, but its float32 value depends on the order of the
// additions, which differs between libraries; two float32 sums a few float32 ulps apart round to
// neighbouring 16-bit values when they straddle a rounding boundary. So those compare within one
// 16-bit ulp of PyTorch's value: |got - want| <= 2^-p·|want| (p = 7 for bfloat16's 8 significant
// bits, 10 for float16's 11), plus 2^-p of the largest |want| of the tensor for sums that cancel to
// near zero. mean rounds twice, here as in PyTorch (the sum, then the division by the count).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tests/tensor/lowp_test_util.h"
#include "tests/tensor/relative_error.h"

using namespace mt;
using mt::test::bits16;
using mt::test::lowp_fixtures;
using mt::test::lowp_prefix;

namespace {

Tensor fixture(DType dt, const std::string& name) { return lowp_fixtures()(lowp_prefix(dt) + name); }

void check_bits(const Tensor& got, DType dt, const std::string& name) {
  INFO(lowp_prefix(dt) << name);
  const Tensor want = fixture(dt, name);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<uint16_t> g = bits16(got), w = bits16(want);
  const std::vector<float> gv = got.to_vector<float>(), wv = want.to_vector<float>();
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i)
    if (g[i] != w[i]) {
      ++bad;
      FAIL_CHECK("element " << i << ": minitrain " << gv[i] << ", PyTorch " << wv[i]);
    }
}

// Within one 16-bit ulp (Note [Low-precision tolerances]).
void check_ulp(const Tensor& got, DType dt, const std::string& name) {
  mt::test::check_within_ulp_of_torch(got, fixture(dt, name), lowp_prefix(dt) + name);
}

// The GEMM inputs the fixture script makes with pattern(): ((i·7919 + seed·104729) mod 1999 − 999)/512.
Tensor lowp_pattern(const Shape& shape, int64_t seed, DType dt) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (int64_t i = 0; i < shape.numel(); ++i)
    v[i] = static_cast<float>(static_cast<double>((i * 7919 + seed * 104729) % 1999 - 999) / 512);
  return from_vector(v, shape).to(dt);
}

}  // namespace

TEST_CASE("lowp: elementwise ops on bfloat16 and float16 are PyTorch's bits (float32 math, one rounding)") {
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor x = fixture(dt, "x"), y = fixture(dt, "y"), b = fixture(dt, "b"), col = fixture(dt, "col");
    const Tensor pos = fixture(dt, "pos");
    check_bits(neg(x), dt, "neg");
    check_bits(exp(x), dt, "exp");
    check_bits(log(pos), dt, "log");
    check_bits(sqrt(pos), dt, "sqrt");
    check_bits(tanh(x), dt, "tanh");
    check_bits(sigmoid(x), dt, "sigmoid");
    check_bits(relu(x), dt, "relu");
    check_bits(abs(x), dt, "abs");
    check_bits(erf(x), dt, "erf");
    check_bits(expm1(x), dt, "expm1");
    check_bits(log1p(pos), dt, "log1p");
    check_bits(pow(x, 2), dt, "square");
    check_ulp(pow(x, 3.0), dt, "cube");  // PyTorch rounds twice here (Note [Low-precision tolerances])
    check_ulp(pow(pos, -0.5), dt, "rsqrt_pow");
    check_bits(x + 0.1, dt, "add_scalar");
    check_bits(x * 0.3, dt, "mul_scalar");
    check_bits(x + y, dt, "add");
    check_bits(x - y, dt, "sub");
    check_bits(x * y, dt, "mul");
    check_bits(x / y, dt, "div");
    check_bits(maximum(x, y), dt, "maximum");
    check_bits(minimum(x, y), dt, "minimum");
    check_bits(x + b, dt, "add_row");
    check_bits(x * col, dt, "mul_col");
    check_bits(x.t() / col.t(), dt, "div_col_t");
    check_bits(lt(x, y), dt, "lt");
    check_bits(eq(x, b), dt, "eq_b");
    Tensor in_place = x.clone();
    in_place.add_(y);
    check_bits(in_place, dt, "add_inplace");
    // A float32 operand: out of place the result is float32, in place it is rounded into x once.
    const Tensor y32 = fixture(dt, "y32");
    const Tensor sum32 = x + y32;
    CHECK(sum32.dtype() == kFloat32);
    CHECK(sum32.to_vector<float>() == fixture(dt, "add_f32").to_vector<float>());
    in_place = x.clone();
    in_place.add_(y32);
    check_bits(in_place, dt, "add_f32_inplace");
  }
}

TEST_CASE("lowp: reductions accumulate in float32 and round once, within one ulp of PyTorch") {
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor x = fixture(dt, "x");
    check_ulp(x.sum(), dt, "sum");
    check_ulp(x.sum({0}), dt, "sum0");
    check_ulp(x.sum({1}), dt, "sum1");
    check_ulp(x.t().sum({1}), dt, "sum_t1");
    check_ulp(x.mean({1}), dt, "mean1");
    check_bits(std::get<0>(x.max(1)), dt, "max1");  // max and min are exact
    check_bits(std::get<0>(x.min(0)), dt, "min0");
    check_bits(x.amax(), dt, "amax");
    check_ulp(var(x, {1}), dt, "var1");
    check_ulp(var(x), dt, "var");
    CHECK(x.argmax(1).to_vector<int64_t>() == x.to(kFloat32).argmax(1).to_vector<int64_t>());
  }
  // float32 accumulation, not 16-bit: 4096 ones sum to 4096 (a bfloat16 accumulator stops at 256).
  CHECK(ones({4096}, {.dtype = kBFloat16}).sum().item() == 4096.0);
  CHECK(ones({64, 4096}, {.dtype = kFloat16}).sum({1}).to_vector<float>() == std::vector<float>(64, 4096.0f));
}

TEST_CASE("lowp: matmul, bmm and linear accumulate in float32, within one ulp of PyTorch") {
  for (DType dt : {kBFloat16, kFloat16}) {
    // (260, 272)·(272, 65): two row tiles and two K panels of the tiled GEMM, wᵀ read as a view.
    const Tensor a = lowp_pattern({260, 272}, 1, dt), w = lowp_pattern({65, 272}, 2, dt);
    check_ulp(matmul(a, w.t()), dt, "matmul");
    check_ulp(matmul(lowp_pattern({3, 20, 40}, 3, dt), lowp_pattern({3, 40, 17}, 4, dt)), dt, "bmm");
    check_ulp(matmul(fixture(dt, "x"), fixture(dt, "y").t()), dt, "matmul_small");
    // The tiled GEMM against the reference loops (both float32 sums, rounded once).
    const Tensor ref = matmul(a.to(kFloat32), w.t().to(kFloat32)).to(dt);
    CHECK(mt::test::relative_error(matmul(a, w.t()).to(kFloat32), ref.to(kFloat32)) < std::ldexp(1.0, -8));
  }
}

TEST_CASE("lowp: gradients of linear, relu, mul and sum come out in the tensors' own dtype, near PyTorch's") {
  for (DType dt : {kBFloat16, kFloat16}) {
    Tensor x = lowp_pattern({20, 40}, 5, dt).requires_grad_();
    Tensor w = lowp_pattern({17, 40}, 6, dt).requires_grad_();
    Tensor bias = lowp_pattern({17}, 7, dt).requires_grad_();
    const Tensor gy = lowp_pattern({20, 17}, 8, dt);
    const Tensor y = linear(x, w, bias);
    check_ulp(y.detach(), dt, "linear");
    (relu(y) * gy).sum().backward();
    for (const Tensor* g : {&x, &w, &bias}) CHECK(g->grad().dtype() == dt);
    check_ulp(x.grad(), dt, "grad_a");
    check_ulp(w.grad(), dt, "grad_w");
    check_ulp(bias.grad(), dt, "grad_bias");
  }
  // var and mean: reductions whose gradients are elementwise in x's dtype.
  Tensor v = from_vector(std::vector<float>{1, 2, 4, 7}, {4}, {.dtype = kBFloat16}).requires_grad_();
  (var(v) + v.mean()).backward();
  CHECK(v.grad().dtype() == kBFloat16);
  // d var / dx = 2(x - 3.5)/3, d mean / dx = 1/4, each rounded to bfloat16.
  std::vector<float> want;
  for (float e : {1.f, 2.f, 4.f, 7.f}) want.push_back(float(BFloat16(float(BFloat16(2 * (e - 3.5f) / 3)) + 0.25f)));
  CHECK(mt::test::relative_error(v.grad().to(kFloat32), from_vector(want, {4})) < std::ldexp(1.0, -7));
  // Through a cast the gradient goes back in the source's dtype: float32 master weights.
  Tensor master = ones({3}).requires_grad_();
  (master.to(kBFloat16) * 2.0).sum().backward();
  CHECK(master.grad().dtype() == kFloat32);
  CHECK(master.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("lowp: a bfloat16 GEMM allocates no float32 copy of its operands (tiles only)") {
  // a (1024, 1024), b (1024, 1024) bfloat16: 2 MiB each; a float32 copy of one would be 4 MiB.
  const Tensor a = lowp_pattern({1024, 1024}, 9, kBFloat16), b = lowp_pattern({1024, 1024}, 10, kBFloat16);
  reset_cpu_peak_memory();
  const size_t before = cpu_memory_stats().bytes_in_use;
  const Tensor c = matmul(a, b.t());
  const size_t extra = cpu_memory_stats().peak_bytes_in_use - before;
  const size_t output = 1024 * 1024 * 2;
  const size_t tiles = 3 * 256 * 256 * 4 * static_cast<size_t>(std::max(get_num_threads(), 1));
  INFO("peak above the inputs: " << extra << " bytes, output " << output << ", tile scratch " << tiles);
  CHECK(extra <= output + tiles);
  CHECK(extra < output + 1024 * 1024 * 4);  // less than one float32 copy of an operand
  CHECK(c.dtype() == kBFloat16);
}
