// bfloat16 and float16 on the GPU against the same 16-bit ops on the CPU (Note [Low-precision
// compute type], tensor/dtype.h): conversions, copies and elementwise arithmetic give the CPU's bits;
// math functions, reductions and GEMMs (float32 sums in another order) agree within one 16-bit unit
// in the last place, plus what float32 summation in a different order can move. Ops with no 16-bit
// CUDA kernel refuse in one line. Needs a GPU (tests/cuda/main.cpp skips with 77 otherwise); runs
// on the emulator in `ctest -L cuda-emu`.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cuda_layouts.h"
#include "tensor/memory.h"

using namespace mt;
using mt::test::gpu;
using mt::test::gpu_as_laid_out;
using mt::test::kGpu;
using mt::test::layouts;

namespace {

constexpr DType kLowp[] = {kBFloat16, kFloat16};

// Uniform values in [low, high) as dtype, the same for the same seed (drawn in float32, rounded).
Tensor sample(const Shape& s, DType dtype, uint64_t seed, double low = -4.0, double high = 4.0) {
  Generator gen(seed);
  Tensor t = empty(s, {.dtype = kFloat32});
  raw::uniform_(t, gen, low, high);
  return raw::cast(t, dtype);
}

// The bytes of each element of t, row-major, as read back from its device.
std::vector<std::vector<unsigned char>> element_bytes(const Tensor& t) {
  const Tensor c = raw::contiguous(raw::to_device(t, kCPU));
  const size_t size = element_size(c.dtype());
  std::vector<std::vector<unsigned char>> out(static_cast<size_t>(c.numel()));
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  for (size_t i = 0; i < out.size(); ++i) out[i].assign(p + i * size, p + (i + 1) * size);
  return out;
}

// got (on the GPU) holds the same bits as want (on the CPU): dtype, shape and every element. With
// any_nan, a NaN may meet any NaN: a NaN that arithmetic makes or passes on carries the hardware's
// sign and payload (x86 keeps an operand's, a GPU makes its canonical 0x7FFFFFFF), which float16
// keeps in its sign bit. Conversions and copies are the same code on both sides: every bit.
void check_same_bits(const Tensor& want, const Tensor& got, const std::string& what, bool any_nan = false) {
  INFO(what);
  REQUIRE(got.device() == kGpu);
  REQUIRE(want.dtype() == got.dtype());
  REQUIRE(want.sizes() == got.sizes());
  const auto w = element_bytes(want), g = element_bytes(got);
  const std::vector<double> wv = raw::to_device(want, kCPU).to_vector<double>(), gv = got.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i)
    if (w[i] != g[i] && !(any_nan && std::isnan(wv[i]) && std::isnan(gv[i]))) {
      ++bad;
      FAIL_CHECK("element " << i << ": cpu " << wv[i] << ", cuda " << gv[i] << " (different bits)");
    }
}
// The same bits, where a NaN may be any NaN: what arithmetic is compared by.
void check_same_values(const Tensor& want, const Tensor& got, const std::string& what) {
  check_same_bits(want, got, what, true);
}

// One unit in the last place of a 16-bit dtype at magnitude x (its subnormal step below the normals).
double ulp16(DType dt, double x) {
  const int mantissa_bits = dt == kBFloat16 ? 7 : 10, min_exponent = dt == kBFloat16 ? -126 : -14;
  const int e = x == 0 || !std::isfinite(x) ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, e - mantissa_bits);
}

// got (GPU) and want (CPU), of one 16-bit dtype, differ by at most one unit in the last place,
// plus slack[i] (what summing in another order may move a float32 sum; none when undefined). NaN
// must meet NaN, and infinity the same infinity.
void check_within_ulp(const Tensor& want, const Tensor& got, const Tensor& slack, const std::string& what) {
  INFO(what);
  REQUIRE(got.device() == kGpu);
  REQUIRE(want.dtype() == got.dtype());
  REQUIRE(want.sizes() == got.sizes());
  const std::vector<double> w = raw::to_device(want, kCPU).to_vector<double>(), g = got.to_vector<double>();
  const std::vector<double> s = slack.defined() ? slack.to_vector<double>() : std::vector<double>(w.size(), 0.0);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    const bool ok = (std::isnan(w[i]) && std::isnan(g[i])) || w[i] == g[i] ||
                    std::abs(w[i] - g[i]) <= ulp16(want.dtype(), std::max(std::abs(w[i]), std::abs(g[i]))) + s[i];
    if (!ok) {
      ++bad;
      FAIL_CHECK("element " << i << ": cpu " << w[i] << ", cuda " << g[i]);
    }
  }
}

// Float32 values that test rounding: signed zeros, ties to even, the largest finite values and what
// rounds past them, float16's subnormals and their ties, float32 subnormals, infinities and NaNs
// (quiet, signalling, negative), then 20,000 random bit patterns.
Tensor tricky_floats() {
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000, 0x3F800000, 0xBF800000,
      0x3F808000, 0x3F818000, 0x3F80C000,              // 1 + 2^-8 (bfloat16 tie to even), 1 + 3·2^-8, 1 + 2^-7 + 2^-8
      0x3F801000, 0x3F803000, 0x3F801001,              // 1 + 2^-11 (float16 tie), 1 + 3·2^-11, just above a tie
      0x477FE000, 0x477FEFFF, 0x477FF000, 0x47800000,  // 65504, just below 65520, 65520 (float16 overflow), 65536
      0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,  // bfloat16's largest, below/at its overflow tie, FLT_MAX
      0x33800000, 0x33000000, 0x33400000, 0x34400000,  // 2^-24, 2^-25 (tie to 0), 1.5·2^-25, 3·2^-25 (tie up)
      0x38800000, 0x387FFFFF, 0x387FC000,              // 2^-14 and just below it
      0x00000001, 0x007FFFFF, 0x00008000, 0x00018000,  // float32 subnormals, bfloat16 subnormal ties
      0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFFFFFFFF};
  Generator gen(7);
  for (int i = 0; i < 20000; ++i) bits.push_back(static_cast<uint32_t>(gen.next_u64()));
  Tensor t = empty({static_cast<int64_t>(bits.size())}, {.dtype = kFloat32});
  std::memcpy(t.raw_data(), bits.data(), bits.size() * 4);
  return t;
}

// Every one of the 65,536 16-bit patterns, as a (256, 256) tensor of dtype: element (i, j) holds
// the pattern 256·i + j, or 256·j + i when transposed.
Tensor all_patterns(DType dtype, bool transposed = false) {
  Tensor t = empty({256, 256}, {.dtype = dtype});
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (uint32_t i = 0; i < 256; ++i)
    for (uint32_t j = 0; j < 256; ++j) p[i * 256 + j] = static_cast<uint16_t>(transposed ? j * 256 + i : i * 256 + j);
  return t;
}

}  // namespace

TEST_CASE("bfloat16 and float16 on the GPU: made, cast and copied with the CPU's bits") {
  const Tensor f = tricky_floats();
  // float64 values whose rounding to float32 first makes a tie (as on the CPU and in PyTorch:
  // double -> float -> 16 bits), and random ones over a wide range.
  std::vector<double> doubles = {1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), 65519.999999, 1e300, -1e-300, 0.1};
  Generator gen(3);
  for (int i = 0; i < 2000; ++i) doubles.push_back(std::ldexp(static_cast<double>(gen.next_u64() % 2000001) - 1e6, static_cast<int>(gen.next_u64() % 80) - 60));
  const Tensor d = from_vector(doubles, {static_cast<int64_t>(doubles.size())}, {.dtype = kFloat64});
  const Tensor ints = from_vector(std::vector<int64_t>{0, -3, 257, 65519, 65520, 65535, int64_t{1} << 40, -(int64_t{1} << 62)},
                                  {8}, {.dtype = kInt64});
  for (DType dt : kLowp) {
    const std::string name = dtype_name(dt);
    // Factories and fills on the device.
    check_same_bits(zeros({5}, {.dtype = dt}), zeros({5}, {.dtype = dt, .device = kGpu}), name + " zeros");
    check_same_bits(full({7}, 0.1, {.dtype = dt}), full({7}, 0.1, {.dtype = dt, .device = kGpu}), name + " full 0.1");
    check_same_bits(full({3}, 1e6, {.dtype = dt}), full({3}, 1e6, {.dtype = dt, .device = kGpu}), name + " full 1e6");
    Tensor strided = zeros({5, 7}, {.dtype = dt, .device = kGpu}), strided_cpu = zeros({5, 7}, {.dtype = dt});
    raw::fill_(raw::slice(strided, 1, 0, 7, 2), -2.5);
    raw::fill_(raw::slice(strided_cpu, 1, 0, 7, 2), -2.5);
    check_same_bits(strided_cpu, strided, name + " strided fill");
    // Narrowing on the device: float32, float64 and int64 sources.
    check_same_bits(raw::cast(f, dt), raw::cast(gpu(f), dt), "float32 -> " + name);
    check_same_bits(raw::cast(d, dt), raw::cast(gpu(d), dt), "float64 -> " + name);
    check_same_bits(raw::cast(ints, dt), raw::cast(gpu(ints), dt), "int64 -> " + name);
    // Widening every pattern, and between the two 16-bit formats.
    const Tensor all = all_patterns(dt);
    for (DType to : {kFloat32, kFloat64, kBFloat16, kFloat16})
      check_same_bits(raw::cast(all, to), raw::cast(gpu(all), to), name + " -> " + dtype_name(to) + ", every pattern");
    const Tensor moderate = sample({1000}, dt, 4, -1000.0, 1000.0);
    check_same_bits(raw::cast(moderate, kInt64), raw::cast(gpu(moderate), kInt64), name + " -> int64");
    // Copies keep every pattern, NaN payloads included: host -> device -> host, and strided copies
    // within the device (a transposed view made contiguous, and a copy into a transposed view).
    check_same_bits(all, gpu(all), name + " host <-> device");
    const Tensor transposed = all_patterns(dt, true);
    check_same_bits(transposed, raw::contiguous(raw::transpose(gpu(all), 0, 1)), name + " strided copy on the device");
    Tensor into = zeros({256, 256}, {.dtype = dt, .device = kGpu});
    raw::copy_(raw::transpose(into, 0, 1), gpu(all));
    check_same_bits(transposed, into, name + " into a strided view");
    CHECK(full({1}, 1.5, {.dtype = dt, .device = kGpu}).str() == "tensor([1.5], shape=[1], dtype=" + name + ", device=cuda:0)");
  }
}

TEST_CASE("bfloat16 and float16 elementwise ops on the GPU give the CPU's bits") {
  for (DType dt : kLowp) {
    const std::string name = dtype_name(dt);
    Tensor base = sample({37, 67}, dt, 1);
    raw::fill_(raw::narrow(raw::narrow(base, 0, 3, 1), 1, 5, 1), std::numeric_limits<double>::quiet_NaN());
    raw::fill_(raw::narrow(raw::narrow(base, 0, 4, 1), 1, 6, 1), std::numeric_limits<double>::infinity());
    const Tensor positive = sample({67}, dt, 2, 0.1, 5.0);
    for (const auto& [layout, x] : layouts(base)) {
      const Tensor xg = gpu_as_laid_out(x);
      const std::string where = " " + layout + " " + name;
      // IEEE float32 arithmetic rounded once: the same bits on both sides.
      for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Relu, UnaryOp::Abs, UnaryOp::Sign, UnaryOp::AddScalar,
                         UnaryOp::MulScalar, UnaryOp::Pow})
        for (double s : {2.0, 0.5, 0.3})
          if (op != UnaryOp::Pow || s != 0.3)
            check_same_values(raw::unary(op, x, s), raw::unary(op, xg, s), std::string(op_name(op)) + where);
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum,
                          BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt,
                          BinaryOp::Ge}) {
        check_same_values(raw::binary(op, x, positive), raw::binary(op, xg, gpu(positive)), std::string(op_name(op)) + where);
        check_same_values(raw::binary(op, positive, x), raw::binary(op, gpu(positive), xg),
                          std::string(op_name(op)) + " (left)" + where);
      }
      // Math functions: CUDA's and the C library's float32 results differ by a few float32 ulps at
      // most, which can move the rounded 16-bit result by one unit.
      for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Erf, UnaryOp::Expm1})
        check_within_ulp(raw::unary(op, x), raw::unary(op, xg), Tensor(), std::string(op_name(op)) + where);
      check_within_ulp(raw::unary(UnaryOp::Pow, x, 3.0), raw::unary(UnaryOp::Pow, xg, 3.0), Tensor(), "pow 3" + where);
    }
    for (UnaryOp op : {UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Log1p})
      check_within_ulp(raw::unary(op, positive), raw::unary(op, gpu(positive)), Tensor(), std::string(op_name(op)) + " " + name);
    // where with a 16-bit condition; mixed dtypes promote (float32 results), and an in-place op with
    // a wider operand computes in float32 and rounds into the 16-bit destination once.
    const Tensor cond = raw::binary(BinaryOp::Gt, base, zeros({1}, {.dtype = dt}));
    const Tensor other = sample({67}, dt, 5);
    check_same_bits(raw::where(cond, base, other), raw::where(gpu(cond), gpu(base), gpu(other)), "where " + name);
    const Tensor wide = sample({37, 67}, kFloat32, 6);
    check_same_values(raw::binary(BinaryOp::Mul, base, wide), raw::binary(BinaryOp::Mul, gpu(base), gpu(wide)),
                      "mul with float32 " + name);
    const DType other_lowp = dt == kBFloat16 ? kFloat16 : kBFloat16;
    const Tensor lowp2 = sample({37, 67}, other_lowp, 7);
    check_same_values(raw::binary(BinaryOp::Add, base, lowp2), raw::binary(BinaryOp::Add, gpu(base), gpu(lowp2)),
                      "bfloat16 + float16");
    Tensor in_place = raw::clone(base), in_place_gpu = gpu(base);
    raw::binary_(BinaryOp::Add, in_place, wide);
    raw::binary_(BinaryOp::Add, in_place_gpu, gpu(wide));
    check_same_values(in_place, in_place_gpu, "add_ float32 into " + name);
    // Moving elements by index.
    const Tensor index = from_vector(std::vector<int64_t>{4, 0, 4, 36}, {4}, {.dtype = kInt64});
    check_same_bits(raw::index_select(base, 0, index), raw::index_select(gpu(base), 0, gpu(index)), "index_select " + name);
    const Tensor gather_index = raw::cast(raw::unary(UnaryOp::MulScalar, sample({37, 9}, kFloat32, 8, 0.0, 1.0), 66.0), kInt64);
    check_same_bits(raw::gather(base, 1, gather_index), raw::gather(gpu(base), 1, gpu(gather_index)), "gather " + name);
  }
}

TEST_CASE("bfloat16 and float16 index_add and scatter_add on the GPU: each addition rounded once, as on the CPU") {
  // Repeated indices: each target gets several rows, added one at a time in float32 and rounded to
  // 16 bits after each, on both sides (Note [16-bit atomic add]); only the order differs, so the
  // results may differ by a rounding per addition: a 16-bit unit of the sum of what was added.
  auto abs64 = [](const Tensor& t) { return raw::cast(raw::unary(UnaryOp::Abs, t), kFloat64); };
  for (DType dt : kLowp) {
    const double unit = dt == kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const Tensor src = sample({4, 12, 5}, dt, 91);
    const Tensor index = from_vector(std::vector<int64_t>{0, 2, 2, 6, 0, 2, 1, 6, 6, 0, 2, 3}, {12}, {.dtype = kInt64});
    const Tensor want = raw::index_add_zeros({4, 7, 5}, 1, index, src);
    const Tensor bound = raw::index_add_zeros({4, 7, 5}, 1, index, abs64(src));
    check_within_ulp(want, raw::index_add_zeros({4, 7, 5}, 1, gpu(index), gpu(src)),
                     raw::unary(UnaryOp::MulScalar, bound, 4 * unit), std::string("index_add ") + dtype_name(dt));
    const Tensor scatter_index = raw::cast(raw::unary(UnaryOp::MulScalar, sample({4, 12, 5}, kFloat32, 92, 0.0, 1.0), 3.0), kInt64);
    const Tensor want_s = raw::scatter_add_zeros({4, 3, 5}, 1, scatter_index, src);
    const Tensor bound_s = raw::scatter_add_zeros({4, 3, 5}, 1, scatter_index, abs64(src));
    check_within_ulp(want_s, raw::scatter_add_zeros({4, 3, 5}, 1, gpu(scatter_index), gpu(src)),
                     raw::unary(UnaryOp::MulScalar, bound_s, 4 * unit), std::string("scatter_add ") + dtype_name(dt));
    // Two neighbours share a 32-bit word: adding to the upper or the lower half leaves the other as it was.
    const Tensor rows = gpu(raw::cast(from_vector(std::vector<double>{1, 2, 4}, {3, 1}), dt));
    for (int64_t target : {0, 1}) {
      const Tensor to = gpu(from_vector(std::vector<int64_t>(3, target), {3}, {.dtype = kInt64}));
      std::vector<double> expected = {0, 0};
      expected[static_cast<size_t>(target)] = 7;
      CHECK(raw::index_add_zeros({2, 1}, 0, to, rows).to_vector<double>() == expected);
    }
  }
}

TEST_CASE("bfloat16 and float16 reductions on the GPU sum in float32") {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  // Rows (a warp and a block per output), columns (coalesced), a split row, several dims.
  const std::vector<Case> cases = {{{37, 1000}, {1}}, {{37, 1000}, {0}}, {{200, 1500}, {0}}, {{4, 5, 6}, {0, 2}},
                                   {{3, 5000}, {1}},  {{300000}, {0}},   {{7, 1, 9}, {1}}};
  for (DType dt : kLowp) {
    for (const Case& c : cases) {
      const Tensor x = sample(c.shape, dt, 11);
      const std::string what = std::string(dtype_name(dt)) + " " + c.shape.str();
      // Both sides sum the same float32 values in different orders: each order is within about
      // r·2^-24·Σ|x| of the exact sum, and the sums are rounded to 16 bits once.
      const Tensor abs_sum = raw::sum(raw::cast(raw::unary(UnaryOp::Abs, x), kFloat64), c.dims);
      const double r = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(abs_sum.numel(), 1));
      const Tensor slack = raw::unary(UnaryOp::MulScalar, abs_sum, 2 * r * std::ldexp(1.0, -24));
      const Tensor xg = gpu(x);
      check_within_ulp(raw::sum(x, c.dims), raw::sum(xg, c.dims), slack, "sum " + what);
      check_within_ulp(raw::mean(x, c.dims), raw::mean(xg, c.dims), raw::unary(UnaryOp::MulScalar, slack, 1.0 / r),
                       "mean " + what);
      check_same_bits(raw::max(x, c.dims), raw::max(xg, c.dims), "max " + what);
      check_same_bits(raw::min(x, c.dims), raw::min(xg, c.dims), "min " + what);
      if (c.dims.size() == 1) check_same_bits(raw::argmax(x, c.dims[0]), raw::argmax(xg, c.dims[0]), "argmax " + what);
    }
    // A 16-bit accumulator would stop growing at 256 (bfloat16) or 2048 (float16): 256 + 1 rounds to 256.
    const Tensor ones_gpu = ones({4096}, {.dtype = dt, .device = kGpu});
    CHECK(raw::sum(ones_gpu).item() == 4096.0);
    CHECK(raw::mean(ones_gpu).item() == 1.0);
    // NaN propagates through max; argmax points at the first NaN.
    const Tensor nan = raw::cast(from_vector(std::vector<double>{1, 3, 3, std::nan(""), 0, 3}, {2, 3}), dt);
    check_same_bits(raw::max(nan, {1}), raw::max(gpu(nan), {1}), "max NaN");
    check_same_bits(raw::argmax(nan, 1), raw::argmax(gpu(nan), 1), "argmax NaN and ties");
  }
}

TEST_CASE("bfloat16 and float16 matmul and linear through cuBLAS: 16-bit operands, float32 sums, one rounding") {
  // Both sides sum exact products (8- or 11-bit mantissas) in float32 in different orders; the
  // slack is what that may move a sum: about k·2^-24·Σ|a||b|.
  auto slack_for = [](const Tensor& a, const Tensor& b) {
    const Tensor abs_product = raw::matmul(raw::cast(raw::unary(UnaryOp::Abs, a), kFloat64),
                                           raw::cast(raw::unary(UnaryOp::Abs, b), kFloat64));
    return raw::unary(UnaryOp::MulScalar, abs_product, 2.0 * static_cast<double>(a.size(-1)) * std::ldexp(1.0, -24));
  };
  for (DType dt : kLowp) {
    const std::string name = dtype_name(dt);
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {33, 65, 17}, {128, 256, 64}, {5, 1, 7}, {1, 300, 1}}) {
      const Tensor a = sample({m, k}, dt, 21, -2.0, 2.0), b = sample({k, n}, dt, 22, -2.0, 2.0);
      const Tensor at = raw::transpose(raw::contiguous(raw::transpose(a, 0, 1)), 0, 1);  // column-major a
      const Tensor bt = raw::transpose(raw::contiguous(raw::transpose(b, 0, 1)), 0, 1);
      const std::string what = name + " " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      const Tensor slack = slack_for(a, b);
      for (const Tensor& A : {a, at})
        for (const Tensor& B : {b, bt})
          check_within_ulp(raw::matmul(A, B), raw::matmul(gpu_as_laid_out(A), gpu_as_laid_out(B)), slack, what);
    }
    // Batched, a shared right matrix (batch stride 0), and linear accumulating onto its bias (beta = 1).
    const Tensor a = sample({4, 9, 6}, dt, 23), b = sample({4, 6, 5}, dt, 24), w = sample({6, 5}, dt, 25);
    check_within_ulp(raw::matmul(a, b), raw::matmul(gpu(a), gpu(b)), slack_for(a, b), "batched " + name);
    check_within_ulp(raw::matmul(a, w), raw::matmul(gpu(a), gpu(w)), slack_for(a, w), "shared matrix " + name);
    const Tensor x = sample({32, 10}, dt, 26), lw = sample({3, 10}, dt, 27), lb = sample({3}, dt, 28);
    const Tensor bias_slack = raw::unary(UnaryOp::MulScalar, raw::cast(raw::unary(UnaryOp::Abs, lb), kFloat64), std::ldexp(1.0, -22));
    check_within_ulp(raw::linear(x, lw, lb), raw::linear(gpu(x), gpu(lw), gpu(lb)),
                     raw::binary(BinaryOp::Add, slack_for(x, raw::transpose(lw, 0, 1)), bias_slack), "linear " + name);
    // The sum is float32 to the end: 4096 products of 1 make 4096 (a 16-bit sum would stop at 256 or 2048).
    CHECK(raw::matmul(ones({1, 4096}, {.dtype = dt, .device = kGpu}), ones({4096, 1}, {.dtype = dt, .device = kGpu})).item() ==
          4096.0);
    // An empty sum is 0; a NaN reaches its row of the result.
    CHECK(raw::matmul(ones({2, 0}, {.dtype = dt, .device = kGpu}), ones({0, 3}, {.dtype = dt, .device = kGpu})).to_vector<double>() ==
          std::vector<double>(6, 0.0));
    Tensor with_nan = sample({3, 4}, dt, 29);
    raw::fill_(raw::narrow(raw::narrow(with_nan, 0, 1, 1), 1, 2, 1), std::numeric_limits<double>::quiet_NaN());
    const std::vector<double> product = raw::matmul(gpu(with_nan), gpu(sample({4, 2}, dt, 30))).to_vector<double>();
    CHECK((!std::isnan(product[0]) && std::isnan(product[2]) && std::isnan(product[3]) && !std::isnan(product[4])));
  }
}

TEST_CASE("a bfloat16 GEMM on the GPU makes no float32 copy of its operands") {
  const Tensor a = sample({512, 512}, kBFloat16, 31).to(kGpu), b = sample({512, 512}, kBFloat16, 32).to(kGpu);
  raw::matmul(a, b);  // the cuBLAS handle and its workspace are made on the first GEMM
  // The output (512 KiB) fits under the limit; a float32 copy of either operand (1 MiB) would not.
  const size_t in_use = tensor_memory(kGpu).in_use;
  set_memory_limit(kGpu, in_use + (size_t{768} << 10));
  Tensor product;
  CHECK_NOTHROW(product = raw::matmul(a, raw::transpose(b, 0, 1)));
  set_memory_limit(kGpu, 0);
  REQUIRE(product.defined());
  check_within_ulp(raw::matmul(raw::to_device(a, kCPU), raw::transpose(raw::to_device(b, kCPU), 0, 1)), product,
                   full({512, 512}, 1e-2, {.dtype = kFloat64}), "512^3 bfloat16");
}

TEST_CASE("bfloat16 and float16 softmax and log_softmax on the GPU: float32 inside, one rounding") {
  // The CPU's 16-bit softmax may not exist; the definition does: the float32 op on the widened
  // input, rounded. exp and log differ by a few float32 units between the two sides, and
  // log_softmax's subtractions can cancel down to them: 1e-6 of slack covers both.
  for (DType dt : kLowp) {
    for (const Shape& s : {Shape{64, 10}, Shape{3, 5000}, Shape{1, 1}, Shape{0, 4}, Shape{7}}) {
      const Tensor x = sample(s, dt, 41, -8.0, 8.0);
      const Tensor wide = raw::cast(x, kFloat32), slack = full(s, 1e-6, {.dtype = kFloat64});
      const std::string what = std::string(dtype_name(dt)) + " " + s.str();
      check_within_ulp(raw::cast(raw::softmax(wide, -1), dt), raw::softmax(gpu(x), -1), slack, "softmax " + what);
      check_within_ulp(raw::cast(raw::log_softmax(wide, -1), dt), raw::log_softmax(gpu(x), -1), slack,
                       "log_softmax " + what);
    }
    // Along a dim that is not the last (moved last and back), and a NaN makes its row NaN.
    const Tensor x = sample({6, 9, 5}, dt, 42);
    check_within_ulp(raw::cast(raw::softmax(raw::cast(x, kFloat32), 1), dt), raw::softmax(gpu(x), 1),
                     full({6, 9, 5}, 1e-6, {.dtype = kFloat64}), "softmax over dim 1");
    const Tensor nan = raw::cast(from_vector(std::vector<double>{1, std::nan(""), 2, 1, 2, 3}, {2, 3}), dt);
    const std::vector<double> y = raw::softmax(gpu(nan), 1).to_vector<double>();
    CHECK((std::isnan(y[0]) && std::isnan(y[2]) && std::abs(y[3] + y[4] + y[5] - 1) < 0.02));
  }
}

TEST_CASE("bfloat16 and float16 layer norm on the GPU: float32 sums and statistics, one rounding") {
  // Rows of 1, 7 and 1000 (a warp walks each), 300 rows (dweight, dbias in two passes on any GPU).
  for (DType dt : kLowp) {
    for (auto [rows, n] : {std::pair{3, 1}, {5, 7}, {2, 1000}, {300, 64}}) {
      const std::string what = std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(n);
      const Tensor x = sample({rows, n}, dt, 71, -3.0, 5.0), w = sample({n}, dt, 72), b = sample({n}, dt, 73);
      const Tensor dy = sample({rows, n}, dt, 74);
      const Tensor x32 = raw::cast(x, kFloat32), w32 = raw::cast(w, kFloat32), b32 = raw::cast(b, kFloat32);
      const raw::LayerNormResult want = raw::layer_norm(x32, w32, b32, 1e-5);
      const raw::LayerNormResult got = raw::layer_norm(gpu(x), gpu(w), gpu(b), 1e-5);
      CHECK((got.mean.dtype() == kFloat32 && got.rstd.dtype() == kFloat32));
      const Tensor small = full({rows, n}, 1e-5, {.dtype = kFloat64});
      check_within_ulp(raw::cast(want.out, dt), got.out, small, "layer_norm " + what);
      // The backward from the same statistics: float32 sums over n (dx) and over the rows (dw, db).
      const raw::LayerNormGrads want_g = raw::layer_norm_backward(raw::cast(dy, kFloat32), x32, w32, want.mean, want.rstd);
      const raw::LayerNormGrads got_g = raw::layer_norm_backward(gpu(dy), gpu(x), gpu(w), got.mean, got.rstd);
      check_within_ulp(raw::cast(want_g.dx, dt), got_g.dx, raw::unary(UnaryOp::MulScalar, small, 10.0), "dx " + what);
      const Tensor column = full({n}, 1e-4, {.dtype = kFloat64});
      check_within_ulp(raw::cast(want_g.dweight, dt), got_g.dweight, column, "dweight " + what);
      check_within_ulp(raw::cast(want_g.dbias, dt), got_g.dbias, column, "dbias " + what);
    }
  }
}

TEST_CASE("bfloat16 and float16 GELU and its gradient on the GPU: float32 inside, one rounding") {
  for (DType dt : kLowp) {
    const Tensor x = sample({37, 67}, dt, 43, -6.0, 6.0), dy = sample({37, 67}, dt, 44);
    const Tensor wide = raw::cast(x, kFloat32), wide_dy = raw::cast(dy, kFloat32);
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
      const std::string what = std::string(dtype_name(dt)) + (form == GeluApproximate::Tanh ? " tanh" : " erf");
      // The CPU's float32 kernel and CUDA's differ by a few float32 units (erf, tanh, exp); in the
      // gradient's tails they are units of terms near 1 that cancel to 1e-4 or less.
      check_within_ulp(raw::cast(raw::gelu(wide, form), dt), raw::gelu(gpu(x), form),
                       full({37, 67}, 1e-6, {.dtype = kFloat64}), "gelu " + what);
      check_within_ulp(raw::cast(raw::gelu_backward(wide_dy, wide, form), dt), raw::gelu_backward(gpu(dy), gpu(x), form),
                       full({37, 67}, 2e-5, {.dtype = kFloat64}), "gelu_backward " + what);
    }
  }
}

TEST_CASE("bfloat16 and float16 convolution and max pooling on the GPU: im2col, cuBLAS, col2im") {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {}},
      {{2, 3, 9, 8}, {4, 3, 3, 2}, {.stride = 2, .padding = 1}},
      {{1, 4, 11, 10}, {6, 2, 3, 3}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = 2, .groups = 2}},
      {{3, 8, 5, 6}, {4, 4, 1, 1}, {.groups = 2}},  // pointwise: no im2col
  };
  auto abs64 = [](const Tensor& t) { return raw::cast(raw::unary(UnaryOp::Abs, t), kFloat64); };
  auto scaled = [](const Tensor& t, double s) { return raw::unary(UnaryOp::MulScalar, t, s); };
  for (DType dt : kLowp) {
    const double unit = dt == kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);  // a 16-bit rounding, relative
    for (const Case& c : cases) {
      const std::string what = std::string(dtype_name(dt)) + " " + c.x.str() + " * " + c.w.str();
      const Tensor x = sample(c.x, dt, 51, -2.0, 2.0), w = sample(c.w, dt, 52, -2.0, 2.0), b = sample({c.w[0]}, dt, 53);
      const Tensor x32 = raw::cast(x, kFloat32), w32 = raw::cast(w, kFloat32), b32 = raw::cast(b, kFloat32);
      // im2col moves elements; col2im sums a few of them in float32.
      const UnfoldOptions uo{.kernel_size = {c.w[2], c.w[3]}, .dilation = c.o.dilation, .padding = c.o.padding,
                             .stride = c.o.stride};
      const Tensor cols = raw::unfold(x32, uo);
      check_same_bits(raw::cast(cols, dt), raw::unfold(gpu(x), uo), "unfold " + what);
      check_within_ulp(raw::cast(raw::fold(cols, {c.x[2], c.x[3]}, uo), dt),
                       raw::fold(gpu(raw::cast(cols, dt)), {c.x[2], c.x[3]}, uo), Tensor(), "fold " + what);
      // The forward is one GEMM onto the bias: float32 sums, one rounding, as the float32 op rounded.
      const double k = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
      const Tensor bound = raw::conv2d(abs64(x), abs64(w), abs64(b), c.o);
      check_within_ulp(raw::cast(raw::conv2d(x32, w32, b32, c.o), dt), raw::conv2d(gpu(x), gpu(w), gpu(b), c.o),
                       scaled(bound, 2 * k * std::ldexp(1.0, -24)), "conv2d " + what);
      // db is one sum. dw sums the batch's per-sample products, each a GEMM rounded to 16 bits, and
      // dx is a GEMM into 16-bit columns that col2im then sums: their slack is a 16-bit rounding of
      // each term.
      const Tensor dy = sample(bound.sizes(), dt, 54);
      const raw::Conv2dGrads want = raw::conv2d_backward(raw::cast(dy, kFloat32), x32, w32, c.o, {});
      const raw::Conv2dGrads got = raw::conv2d_backward(gpu(dy), gpu(x), gpu(w), c.o, {});
      const raw::Conv2dGrads bounds = raw::conv2d_backward(abs64(dy), abs64(x), abs64(w), c.o, {});
      const double rows = static_cast<double>(dy.numel() / dy.size(1));
      check_within_ulp(raw::cast(want.dw, dt), got.dw, scaled(bounds.dw, unit), "dw " + what);
      check_within_ulp(raw::cast(want.db, dt), got.db, scaled(bounds.db, 2 * rows * std::ldexp(1.0, -24)), "db " + what);
      check_within_ulp(raw::cast(want.dx, dt), got.dx, scaled(bounds.dx, unit), "dx " + what);
    }
    // Max pooling selects: the CPU's float32 values (exact in 16 bits) and indices, NaN winning.
    Tensor x = sample({3, 5, 13, 12}, dt, 55);
    raw::fill_(raw::narrow(raw::view(x, {-1}), 0, 100, 1), std::numeric_limits<double>::quiet_NaN());
    for (const Pool2dOptions& o : {Pool2dOptions{.kernel_size = 2}, Pool2dOptions{.kernel_size = 3, .stride = 2, .padding = 1}}) {
      const raw::MaxPool2dResult want = raw::max_pool2d(raw::cast(x, kFloat32), o), got = raw::max_pool2d(gpu(x), o);
      check_same_values(raw::cast(want.out, dt), got.out, std::string("max_pool2d ") + dtype_name(dt));
      CHECK(want.indices.to_vector<int64_t>() == got.indices.to_vector<int64_t>());
    }
  }
}

TEST_CASE("bfloat16 and float16 attention on the GPU: float32 inside, a float32 lse, one rounding") {
  for (DType dt : kLowp) {
    for (bool causal : {false, true}) {
      for (auto [tq, tk, d] : {std::tuple{17, 17, 8}, {5, 9, 64}}) {
        if (causal && tq != tk) continue;
        const std::string what = std::string(dtype_name(dt)) + (causal ? " causal " : " full ") + std::to_string(tq) +
                                 "x" + std::to_string(tk) + " d" + std::to_string(d);
        const Tensor q = sample({1, 2, tq, d}, dt, 61), k = sample({1, 2, tk, d}, dt, 62), v = sample({1, 2, tk, d}, dt, 63);
        const Tensor q32 = raw::cast(q, kFloat32), k32 = raw::cast(k, kFloat32), v32 = raw::cast(v, kFloat32);
        const AttentionOptions o{.causal = causal};
        const raw::AttentionResult want = raw::scaled_dot_product_attention(q32, k32, v32, o);
        const raw::AttentionResult got = raw::scaled_dot_product_attention(gpu(q), gpu(k), gpu(v), o);
        CHECK(got.lse.dtype() == kFloat32);
        const Tensor slack = full(want.out.sizes(), 1e-5, {.dtype = kFloat64});
        check_within_ulp(raw::cast(want.out, dt), got.out, slack, "attention " + what);
        // The backward sees the 16-bit out; the CPU's float32 backward is given the same one.
        const Tensor dout = sample(want.out.sizes(), dt, 64);
        const AttentionParams p = raw::attention_params(q, o);
        const raw::AttentionGrads want_g = raw::scaled_dot_product_attention_backward(
            raw::cast(dout, kFloat32), q32, k32, v32, raw::cast(raw::to_device(got.out, kCPU), kFloat32), want.lse, p);
        const raw::AttentionGrads got_g =
            raw::scaled_dot_product_attention_backward(gpu(dout), gpu(q), gpu(k), gpu(v), got.out, got.lse, p);
        check_within_ulp(raw::cast(want_g.dq, dt), got_g.dq, full(q.sizes(), 1e-4, {.dtype = kFloat64}), "dq " + what);
        check_within_ulp(raw::cast(want_g.dk, dt), got_g.dk, full(k.sizes(), 1e-4, {.dtype = kFloat64}), "dk " + what);
        check_within_ulp(raw::cast(want_g.dv, dt), got_g.dv, full(v.sizes(), 1e-4, {.dtype = kFloat64}), "dv " + what);
      }
    }
  }
}

TEST_CASE("a bfloat16 MLP trains on the GPU like on the CPU: losses, gradients, SGD steps") {
  // Linear, ReLU, Linear, MSE in bfloat16 end to end (forward GEMMs onto the bias, backward GEMMs
  // and bias sums, SGD's elementwise update). Both sides round every activation to 16 bits, and a
  // sum in another order can flip a rounding that later layers carry: the comparison allows a few
  // bfloat16 units (2^-8 relative each) of the result's scale, far below what a wrong kernel makes.
  auto make = [] {
    manual_seed(9);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(10, 32), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, 3));
    model->to(kBFloat16);
    return model;
  };
  auto cpu_model = make(), gpu_model = make();
  gpu_model->to(kGpu);
  optim::SGD cpu_opt(cpu_model->parameters(), {.lr = 0.05}), gpu_opt(gpu_model->parameters(), {.lr = 0.05});
  nn::MSELoss mse;
  const Tensor x = sample({64, 10}, kBFloat16, 81), y = sample({64, 3}, kBFloat16, 82);
  const Tensor xg = gpu(x), yg = gpu(y);
  auto close = [](const Tensor& want, const Tensor& got, const std::string& what) {
    const std::vector<double> w = want.to_vector<double>(), g = got.to_vector<double>();
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    int bad = 0;
    for (size_t i = 0; i < w.size() && bad < 5; ++i)
      if (!(std::abs(w[i] - g[i]) <= 4 * std::ldexp(scale, -8))) {
        ++bad;
        FAIL_CHECK(what << " element " << i << ": cpu " << w[i] << ", cuda " << g[i]);
      }
  };
  for (int step = 0; step < 3; ++step) {
    const Tensor lc = mse(cpu_model->forward(x), y), lg = mse(gpu_model->forward(xg), yg);
    REQUIRE(lg.dtype() == kBFloat16);
    close(lc, lg, "loss at step " + std::to_string(step));
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    lc.backward();
    lg.backward();
    const auto cp = cpu_model->named_parameters(), gp = gpu_model->named_parameters();
    for (size_t i = 0; i < cp.size(); ++i) {
      REQUIRE(gp[i].second.grad().dtype() == kBFloat16);
      close(cp[i].second.grad(), gp[i].second.grad(), "grad of " + cp[i].first);
    }
    cpu_opt.step();
    gpu_opt.step();
  }
}

TEST_CASE("ops without a 16-bit CUDA kernel refuse bfloat16 and float16 in one line") {
  for (DType dt : kLowp) {
    const Tensor m = ones({3, 8}, {.dtype = dt, .device = kGpu});
    Generator gen(1);
    const std::vector<std::pair<std::string, std::function<void()>>> refused = {
        {"argsort", [&] { raw::argsort(m, 1, false); }},
        {"uniform", [&] { raw::uniform_(m, gen); }},
    };
    for (const auto& [op, call] : refused) {
      INFO(op << " on " << dtype_name(dt));
      try {
        call();
        FAIL_CHECK("no error");
      } catch (const Error& e) {
        const std::string message = e.what();
        CHECK(message.find(op) != std::string::npos);  // names the op (or the kernel that refuses)
        CHECK(message.find(dtype_name(dt)) != std::string::npos);
        CHECK(message.find('\n') == std::string::npos);
      }
    }
  }
}
