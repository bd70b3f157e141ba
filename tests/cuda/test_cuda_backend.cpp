// Backend conformance: every raw op on CUDA tensors against the same op on the CPU backend, which is
// the reference. Layouts: contiguous, broadcast (stride 0), transposed/strided, unaligned views,
// empty, and large enough for many blocks and the grid-stride loops; every dtype an op supports;
// NaN cases. Then the pieces around the kernels: host <-> device copies (pageable, pinned, chunked),
// device-side index errors, the caching allocator in a training loop, and autograd + optimizers on
// a small MLP, CUDA against CPU. Needs a GPU (tests/cuda/main.cpp skips with 77 otherwise).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tensor/cuda/cuda_allocator.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_event.h"
#include "tensor/cuda/cuda_gemm.h"
#include "tensor/cuda/indexer.h"
#include "tensor/raw_ops.h"
#include "cuda_layouts.h"

using namespace mt;
using mt::test::kGpu;
using mt::test::layouts;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// t on the GPU in t's own layout (cuda_layouts.h), so that the strided and unaligned operands
// below exercise the kernels' strided and unaligned paths, not only their contiguous ones.
Tensor gpu(const Tensor& t) { return test::gpu_as_laid_out(t); }

// Values with both signs, some zeros, in a given shape and dtype (reproducible).
Tensor sample(const Shape& s, DType dtype, uint64_t seed = 1) {
  Generator gen(seed);
  Tensor t = empty(s, {.dtype = is_floating(dtype) ? dtype : kFloat64});
  raw::uniform_(t, gen, -4.0, 4.0);
  if (!is_floating(dtype)) t = raw::cast(raw::unary(UnaryOp::MulScalar, t, 3.0), kInt64);
  return t;
}
Tensor positive(const Shape& s, DType dtype, uint64_t seed = 2) {
  Generator gen(seed);
  Tensor t = empty(s, {.dtype = dtype});
  raw::uniform_(t, gen, 0.1, 5.0);
  return t;
}

// Same shape and dtype, and every element equal within rtol/atol (NaN where the other has NaN).
void check_close(const Tensor& cpu_result, const Tensor& gpu_result, double rtol, double atol,
                 const std::string& what) {
  INFO(what);
  REQUIRE(gpu_result.device() == kGpu);
  REQUIRE(cpu_result.sizes() == gpu_result.sizes());
  REQUIRE(cpu_result.dtype() == gpu_result.dtype());
  const std::vector<double> want = cpu_result.to_vector<double>(), got = gpu_result.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const bool same_nan = std::isnan(want[i]) && std::isnan(got[i]);
    const bool ok = same_nan || want[i] == got[i] || std::abs(want[i] - got[i]) <= atol + rtol * std::abs(want[i]);
    if (!ok) {
      ++bad;
      FAIL_CHECK("element " << i << ": cpu " << want[i] << ", cuda " << got[i]);
    }
  }
}
double rtol_for(DType t) { return t == kFloat32 ? 2e-5 : t == kFloat64 ? 1e-12 : 0; }

}  // namespace

TEST_CASE("copies: host <-> device round trips for every dtype, strided, chunked and pinned") {
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    const Tensor x = sample({37, 53}, dt);
    CHECK(gpu(x).to_vector<double>() == x.to_vector<double>());
    // strided source and destination on both sides
    const Tensor xt = raw::transpose(x, 0, 1);
    CHECK(raw::to_device(gpu(xt), kCPU).to_vector<double>() == xt.to_vector<double>());
    Tensor dst = gpu(zeros({53, 37}, {.dtype = dt}));
    raw::copy_(raw::transpose(dst, 0, 1), gpu(x));
    CHECK(dst.to_vector<double>() == xt.to_vector<double>());
    // casts on the device, both directions
    for (DType to : {kFloat32, kFloat64, kInt64}) check_close(raw::cast(x, to), raw::cast(gpu(x), to), 0, 0, "cast");
  }
  // More than the 4 MiB staging chunk, with a partial last chunk.
  const Tensor big = sample({3 * 1024 * 1024 + 7}, kFloat32);
  CHECK(raw::to_device(gpu(big), kCPU).to_vector<float>() == big.to_vector<float>());
  // Pinned host tensors skip the staging.
  Tensor pinned = cuda::empty_pinned({1000}, kFloat32);
  raw::copy_(pinned, sample({1000}, kFloat32));
  CHECK(cuda::is_pinned(pinned.raw_data()));
  const Tensor on_gpu = gpu(pinned);
  Tensor back = cuda::empty_pinned({1000}, kFloat32);
  backend(kGpu).copy(back, on_gpu);
  CHECK(back.to_vector<float>() == pinned.to_vector<float>());
  // float16 storage casts, as on the CPU
  const Tensor h = raw::cast(sample({257}, kFloat32), DType::Float16);
  check_close(raw::cast(h, kFloat32), raw::cast(gpu(h), kFloat32), 0, 0, "float16 -> float32");
  const Tensor f = sample({257}, kFloat32);
  check_close(raw::cast(raw::cast(f, DType::Float16), kFloat32), raw::cast(raw::cast(gpu(f), DType::Float16), kFloat32), 0,
              0, "float32 -> float16 rounds like the CPU");
  // Empty tensors and 0-dim scalars.
  CHECK(gpu(zeros({0, 3})).numel() == 0);
  CHECK(gpu(scalar_tensor(2.5)).item() == 2.5);
  CHECK(gpu(scalar_tensor(2.5)).str() == "tensor(2.5, shape=[], dtype=float32, device=cuda:0)");
}

TEST_CASE("fill and factories on the device, including strided views") {
  Tensor t = zeros({5, 7}, {.device = kGpu});
  raw::fill_(raw::slice(t, 1, 0, 7, 2), 3.0);
  Tensor expected = zeros({5, 7});
  raw::fill_(raw::slice(expected, 1, 0, 7, 2), 3.0);
  check_close(expected, t, 0, 0, "strided fill");
  check_close(ones({3}, {.dtype = kInt64}), ones({3}, {.dtype = kInt64, .device = kGpu}), 0, 0, "ones");
  check_close(arange(10), arange(10, {.dtype = kInt64, .device = kGpu}), 0, 0, "arange");
}

TEST_CASE("unary ops match the CPU for every dtype and layout") {
  const std::vector<UnaryOp> any = {UnaryOp::Neg, UnaryOp::Relu, UnaryOp::Abs, UnaryOp::Sign,
                                    UnaryOp::AddScalar, UnaryOp::MulScalar, UnaryOp::Pow};
  const std::vector<UnaryOp> floating = {UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Erf, UnaryOp::Expm1};
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    for (const auto& [name, x] : layouts(sample({67, 129}, dt))) {
      std::vector<UnaryOp> ops = any;
      if (is_floating(dt)) ops.insert(ops.end(), floating.begin(), floating.end());
      for (UnaryOp op : ops)
        for (double s : {2.0, 0.5, 3.0}) {
          if (op == UnaryOp::Pow && !is_floating(dt) && s != 2.0) continue;
          check_close(raw::unary(op, x, s), raw::unary(op, gpu(x), s), 4 * rtol_for(dt), 1e-6 * is_floating(dt),
                      std::string(op_name(op)) + " " + name + " " + dtype_name(dt));
        }
    }
    if (is_floating(dt)) {
      const Tensor p = positive({1000}, dt);
      for (UnaryOp op : {UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Log1p})
        check_close(raw::unary(op, p), raw::unary(op, gpu(p)), 4 * rtol_for(dt), 0, op_name(op));
    }
  }
  // NaN stays NaN through relu, and many blocks with a grid-stride tail
  const Tensor nan = from_vector(std::vector<double>{kNaN, -1, 2}, {3});
  check_close(raw::unary(UnaryOp::Relu, nan), raw::unary(UnaryOp::Relu, gpu(nan)), 0, 0, "relu NaN");
  const Tensor big = sample({5, 1000003}, kFloat32);
  check_close(raw::unary(UnaryOp::Tanh, big), raw::unary(UnaryOp::Tanh, gpu(big)), 1e-5, 1e-6, "big tanh");
  // in place on a strided view
  Tensor a = sample({6, 8}, kFloat32), ag = gpu(a);
  raw::unary_(UnaryOp::MulScalar, raw::transpose(a, 0, 1), 3.0);
  raw::unary_(UnaryOp::MulScalar, raw::transpose(ag, 0, 1), 3.0);
  check_close(a, ag, 0, 0, "in-place mul on a transposed view");
}

TEST_CASE("binary ops and where match the CPU, with broadcasting and NaN") {
  const std::vector<BinaryOp> ops = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                                     BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Ne,
                                     BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge};
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    const Tensor b = dt == kInt64 ? raw::binary(BinaryOp::Add, raw::unary(UnaryOp::Abs, sample({129}, dt, 5)), ones({1}, {.dtype = kInt64}))
                                  : positive({129}, dt);
    for (const auto& [name, a] : layouts(sample({67, 129}, dt))) {
      for (BinaryOp op : ops) {
        const std::string what = std::string(op_name(op)) + " " + name + " " + dtype_name(dt);
        check_close(raw::binary(op, a, b), raw::binary(op, gpu(a), gpu(b)), rtol_for(dt), 0, what + " (bias)");
        if (!(op == BinaryOp::Div && dt == kInt64))  // a has zeros: the CPU would throw
          check_close(raw::binary(op, b, a), raw::binary(op, gpu(b), gpu(a)), rtol_for(dt), 0, what + " (bias left)");
        const Tensor c = sample({67, 1}, dt, 9);  // (67, 1) against (67, 129)
        if (op != BinaryOp::Div) check_close(raw::binary(op, a, c), raw::binary(op, gpu(a), gpu(c)), rtol_for(dt), 0, what + " (column)");
        // Same shape: with the unaligned layout every operand is one dense run, not 16-byte aligned.
        const Tensor d = raw::binary(BinaryOp::Add, raw::unary(UnaryOp::Abs, sample({67, 129}, dt, 10)), ones({1}, {.dtype = dt}));
        check_close(raw::binary(op, a, d), raw::binary(op, gpu(a), gpu(d)), rtol_for(dt), 0, what + " (same shape)");
      }
    }
  }
  const Tensor x = from_vector(std::vector<double>{kNaN, 1, kNaN, -2}, {4});
  const Tensor y = from_vector(std::vector<double>{0, kNaN, kNaN, 3}, {4});
  for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Ne})
    check_close(raw::binary(op, x, y), raw::binary(op, gpu(x), gpu(y)), 0, 0, std::string(op_name(op)) + " NaN");
  // where with float and int64 conditions, broadcast branches
  const Tensor cond = raw::binary(BinaryOp::Gt, sample({50, 60}, kFloat32), zeros({1}));
  const Tensor a = sample({50, 60}, kFloat32, 3), bb = sample({60}, kFloat32, 4);
  check_close(raw::where(cond, a, bb), raw::where(gpu(cond), gpu(a), gpu(bb)), 0, 0, "where");
  const Tensor icond = raw::cast(cond, kInt64);
  check_close(raw::where(icond, a, bb), raw::where(gpu(icond), gpu(a), gpu(bb)), 0, 0, "where int64 cond");
  // integer division by zero is an error at the next synchronisation, not a crash
  const Tensor q = raw::binary(BinaryOp::Div, gpu(from_vector(std::vector<int64_t>{4, 5}, {2})),
                               gpu(from_vector(std::vector<int64_t>{2, 0}, {2})));
  CHECK_THROWS_WITH_AS(q.to_vector<int64_t>(), doctest::Contains("integer division by zero"), Error);
  CHECK(gpu(ones({2})).to_vector<float>() == std::vector<float>{1, 1});  // the error was cleared
}

TEST_CASE("32-bit and 64-bit index math: strided, broadcast, contiguous and window kernels equal the CPU's") {
  // Note [32-bit index math]: the kernels index in 32 bits when every offset fits index32_limit().
  // The limit is lowered here so the same small tensors also take the 64-bit path.
  const Tensor base = sample({67, 129}, kFloat32, 3), bias = sample({129}, kFloat32, 4);
  const Tensor transposed = layouts(base)[1].second;  // strides (1, 67): offsets up to 66 + 128·67 = 8642
  const auto ix = cuda::make_indexer<2>(transposed.sizes(), {transposed.strides().begin(), transposed.strides().begin()});
  struct Limit {  // restores the limit however the case ends
    int64_t saved = cuda::index32_limit();
    ~Limit() { cuda::index32_limit() = saved; }
  } restore;
  CHECK(cuda::fits_index32(ix, transposed.numel()));  // the default limit, 2^31 - 1
  cuda::index32_limit() = 8643;                       // the element count; the largest offset is 8642
  CHECK(cuda::fits_index32(ix, transposed.numel()));
  cuda::index32_limit() = 8642;
  CHECK_FALSE(cuda::fits_index32(ix, transposed.numel()));  // 8643 elements
  CHECK(cuda::fits_index32({8642, 100}));
  CHECK_FALSE(cuda::fits_index32({8643}));
  const Tensor cond = raw::binary(BinaryOp::Gt, base, zeros({1}));
  const Tensor idx = from_vector(std::vector<int64_t>{4, 0, 66, 4, 2}, {5});
  const Tensor planes = sample({2, 3, 9, 8}, kFloat32, 5);
  const UnfoldOptions uo{.kernel_size = {3, 2}, .padding = 1, .stride = 2};
  for (int64_t limit : {int64_t{INT32_MAX}, int64_t{0}}) {
    cuda::index32_limit() = limit;
    const std::string bits = limit == 0 ? " (64-bit)" : " (32-bit)";
    for (const auto& [name, a] : layouts(base)) {  // contiguous, transposed, unaligned, broadcast
      check_close(raw::unary(UnaryOp::Neg, a), raw::unary(UnaryOp::Neg, gpu(a)), 0, 0, "neg " + name + bits);
      check_close(raw::binary(BinaryOp::Add, a, bias), raw::binary(BinaryOp::Add, gpu(a), gpu(bias)), 0, 0,
                  "add bias " + name + bits);
      check_close(raw::cast(a, kFloat64), raw::cast(gpu(a), kFloat64), 0, 0, "cast " + name + bits);
      check_close(raw::where(cond, a, bias), raw::where(gpu(cond), gpu(a), gpu(bias)), 0, 0, "where " + name + bits);
    }
    Tensor filled = zeros({5, 7}, {.device = kGpu}), want = zeros({5, 7});
    raw::fill_(raw::slice(filled, 1, 0, 7, 2), 3.0);
    raw::fill_(raw::slice(want, 1, 0, 7, 2), 3.0);
    check_close(want, filled, 0, 0, "strided fill" + bits);
    check_close(raw::index_select(base, 0, idx), raw::index_select(gpu(base), 0, gpu(idx)), 0, 0, "index_select" + bits);
    check_close(raw::index_add_zeros(base.sizes(), 0, idx, raw::index_select(base, 0, idx)),
                raw::index_add_zeros(base.sizes(), 0, gpu(idx), gpu(raw::index_select(base, 0, idx))), rtol_for(kFloat32),
                0, "index_add" + bits);
    const Tensor gi = from_vector(std::vector<int64_t>{0, 128, 2, 1}, {1, 4});
    const Tensor row = raw::contiguous(raw::narrow(base, 0, 0, 1));  // (1, 129)
    check_close(raw::gather(row, 1, gi), raw::gather(gpu(row), 1, gpu(gi)), 0, 0, "gather" + bits);
    check_close(raw::scatter_add_zeros({1, 129}, 1, gi, sample({1, 4}, kFloat32, 6)),
                raw::scatter_add_zeros({1, 129}, 1, gpu(gi), gpu(sample({1, 4}, kFloat32, 6))), 0, 0, "scatter_add" + bits);
    const Tensor cols = raw::unfold(planes, uo);
    check_close(cols, raw::unfold(gpu(planes), uo), 0, 0, "unfold (im2col)" + bits);
    check_close(raw::fold(cols, {9, 8}, uo), raw::fold(gpu(cols), {9, 8}, uo), 1e-6, 0, "fold (col2im)" + bits);
    const raw::MaxPool2dResult mp = raw::max_pool2d(planes, {.kernel_size = 3, .stride = 2, .padding = 1});
    const raw::MaxPool2dResult mg = raw::max_pool2d(gpu(planes), {.kernel_size = 3, .stride = 2, .padding = 1});
    check_close(mp.out, mg.out, 0, 0, "max_pool2d" + bits);
    CHECK(mp.indices.to_vector<int64_t>() == mg.indices.to_vector<int64_t>());
  }
}

TEST_CASE("reductions match the CPU over any dims and layouts, with NaN and argmax ties") {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {
      {{37, 1000}, {1}},  {{37, 1000}, {0}},   {{4, 5, 6}, {0, 2}}, {{4, 5, 6}, {1}}, {{4, 5, 6}, {}},
      {{3, 5000}, {1}},   {{5000, 3}, {0}},    {{1111, 1030}, {0}}, {{1, 1}, {0}},    {{0, 4}, {0}},
      {{7, 1, 9}, {1}},   {{300000}, {0}}};
  // (1111, 1030) over dim 0: enough outputs (1024) for the column kernel, and rows long enough
  // (2 x 256) to split into chunks, the last one shorter (Note [Split reductions]); transposed, a
  // block per row (longer than 1024).
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    for (const Case& c : cases) {
      Tensor x = sample(c.shape, dt);
      for (const Tensor& in : {x, c.shape.size() == 2 ? raw::transpose(raw::contiguous(raw::transpose(x, 0, 1)), 0, 1) : x}) {
        const std::string what = std::string(dtype_name(dt)) + " " + c.shape.str();
        // Sum order differs between the backends: float32 to ~1e-5 of the magnitude.
        const Tensor want = raw::sum(in, c.dims);
        const double r = static_cast<double>(in.numel()) / static_cast<double>(std::max<int64_t>(want.numel(), 1));
        const double atol = dt == kFloat32 ? 1e-3 + 4e-6 * r : dt == kFloat64 ? 1e-9 : 0;
        check_close(want, raw::sum(gpu(in), c.dims), 1e-5 * is_floating(dt), atol, "sum " + what);
        if (in.numel() == 0) continue;
        check_close(raw::max(in, c.dims), raw::max(gpu(in), c.dims), 0, 0, "max " + what);
        check_close(raw::reduce(ReductionOp::Min, in, c.dims, false, "min"),
                    raw::reduce(ReductionOp::Min, gpu(in), c.dims, false, "min"), 0, 0, "min " + what);
        if (c.dims.size() == 1) check_close(raw::argmax(in, c.dims[0]), raw::argmax(gpu(in), c.dims[0]), 0, 0, "argmax " + what);
      }
    }
  }
  // ties: first occurrence; NaN: propagates, and argmax points at the first NaN
  const Tensor t = from_vector(std::vector<double>{1, 3, 3, kNaN, 0, kNaN, 2, 3, 3, 1, 3, 0}, {3, 4});
  check_close(raw::argmax(t, 1), raw::argmax(gpu(t), 1), 0, 0, "argmax ties and NaN");
  check_close(raw::max(t, {1}), raw::max(gpu(t), {1}), 0, 0, "max NaN");
  check_close(raw::reduce(ReductionOp::Min, t, {0}, false, "min"), raw::reduce(ReductionOp::Min, gpu(t), {0}, false, "min"), 0, 0, "min NaN");
  const Tensor wide = raw::cast(from_vector(std::vector<double>(5000, 7.0), {1, 5000}), kFloat32);
  CHECK(raw::argmax(gpu(wide), 1).item() == 0);  // 5000 equal values: block path, first index
  // One output of 300000 is split over many blocks (Note [Split reductions]) on any GPU: ties and
  // NaN must still resolve to the first index across the chunks' partials.
  std::vector<double> flat(300000, 7.0);
  CHECK(raw::argmax(gpu(from_vector(flat, {300000})), 0).item() == 0);
  flat[250000] = kNaN;
  flat[260000] = kNaN;
  CHECK(raw::argmax(gpu(from_vector(flat, {300000})), 0).item() == 250000);
  CHECK(std::isnan(raw::max(gpu(from_vector(flat, {300000})), {0}).item()));
}

TEST_CASE("softmax and log_softmax match the CPU, for short and long rows, large values and NaN") {
  for (DType dt : {kFloat32, kFloat64}) {
    for (const Shape& s : {Shape{64, 10}, Shape{3, 5000}, Shape{1, 1}, Shape{0, 4}, Shape{7}}) {
      const Tensor x = raw::unary(UnaryOp::MulScalar, sample(s, dt), 50.0);  // |x| up to 200: needs the max shift
      check_close(raw::softmax(x, -1), raw::softmax(gpu(x), -1), 1e-5, 1e-7, "softmax " + s.str());
      check_close(raw::log_softmax(x, -1), raw::log_softmax(gpu(x), -1), 1e-5, 1e-5, "log_softmax " + s.str());
    }
  }
  const Tensor nan = from_vector(std::vector<double>{1, kNaN, 2, 1, 2, 3}, {2, 3});
  check_close(raw::softmax(nan, 1), raw::softmax(gpu(nan), 1), 1e-12, 0, "softmax NaN row");
}

TEST_CASE("gemm through cuBLAS matches the CPU: transposes, batches, shared matrices, int64, accumulate") {
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {33, 65, 17}, {128, 256, 64}, {5, 1, 7}, {1, 300, 1}}) {
      const Tensor a = sample({m, k}, dt, 11), b = sample({k, n}, dt, 12);
      const Tensor at = raw::transpose(raw::contiguous(raw::transpose(a, 0, 1)), 0, 1);  // column-major a
      const Tensor bt = raw::transpose(raw::contiguous(raw::transpose(b, 0, 1)), 0, 1);
      const double rtol = dt == kFloat32 ? 1e-4 : dt == kFloat64 ? 1e-12 : 0, atol = dt == kFloat32 ? 5e-3 : 1e-9 * is_floating(dt);
      const std::string what = std::string(dtype_name(dt)) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      for (const Tensor& A : {a, at})
        for (const Tensor& B : {b, bt}) check_close(raw::matmul(A, B), raw::matmul(gpu(A), gpu(B)), rtol, atol, what);
    }
  }
  // batched (B, M, K)·(B, K, N), and a shared right matrix (batch stride 0 after broadcasting)
  const Tensor a = sample({4, 9, 6}, kFloat32), b = sample({4, 6, 5}, kFloat32), w = sample({6, 5}, kFloat32);
  check_close(raw::matmul(a, b), raw::matmul(gpu(a), gpu(b)), 1e-5, 1e-5, "batched");
  check_close(raw::matmul(a, w), raw::matmul(gpu(a), gpu(w)), 1e-5, 1e-5, "shared matrix");
  check_close(raw::matmul(a, raw::expand(w, {4, 6, 5})), raw::matmul(gpu(a), raw::expand(gpu(w), {4, 6, 5})), 1e-5,
              1e-5, "expanded batch (stride 0)");
  // linear: the GEMM accumulates onto the bias (beta = 1), with wᵀ as a column-major view
  const Tensor x = sample({32, 10}, kFloat32), lw = sample({3, 10}, kFloat32), lb = sample({3}, kFloat32);
  check_close(raw::linear(x, lw, lb), raw::linear(gpu(x), gpu(lw), gpu(lb)), 1e-5, 1e-5, "linear");
  // TF32 is an explicit opt-in
  CHECK(!cuda::allow_tf32());
}

TEST_CASE("index ops match the CPU with repeated indices, and a bad index is an error, not a crash") {
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    const Tensor x = sample({6, 5, 4}, dt);
    const Tensor idx = from_vector(std::vector<int64_t>{4, 0, 4, 4, 2}, {5});
    for (int64_t dim : {0, 1, 2}) {
      const Tensor ii = dim == 2 ? from_vector(std::vector<int64_t>{3, 0, 3}, {3}) : idx;  // dim 2 has size 4
      check_close(raw::index_select(x, dim, ii), raw::index_select(gpu(x), dim, gpu(ii)), 0, 0, "index_select");
      const Tensor src = raw::index_select(x, dim, ii);
      check_close(raw::index_add_zeros(x.sizes(), dim, ii, src), raw::index_add_zeros(x.sizes(), dim, gpu(ii), gpu(src)),
                  rtol_for(dt), 0, "index_add");
    }
    const Tensor gi = from_vector(std::vector<int64_t>{0, 2, 2, 1, 1, 1, 0, 0}, {2, 4});
    const Tensor gx = sample({2, 3}, dt);
    check_close(raw::gather(gx, 1, gi), raw::gather(gpu(gx), 1, gpu(gi)), 0, 0, "gather");
    const Tensor src = sample({2, 4}, dt, 4);
    check_close(raw::scatter_add_zeros({2, 3}, 1, gi, src), raw::scatter_add_zeros({2, 3}, 1, gpu(gi), gpu(src)),
                rtol_for(dt), 0, "scatter_add");
  }
  // Many repeated indices accumulate atomically.
  const Tensor ones_src = ones({100000, 1});
  const Tensor same = zeros({100000}, {.dtype = kInt64});
  CHECK(raw::index_add_zeros({1, 1}, 0, gpu(same), gpu(ones_src)).item() == 100000.0);
  // Out of range: reported at the next synchronisation, naming the op and the index.
  const Tensor bad = raw::index_select(gpu(ones({3, 2})), 0, gpu(from_vector(std::vector<int64_t>{0, 7}, {2})));
  CHECK_THROWS_WITH_AS(backend(kGpu).synchronize(), doctest::Contains("index_select on CUDA: index 7"), Error);
  const Tensor g = raw::gather(gpu(ones({2, 3})), 1, gpu(from_vector(std::vector<int64_t>{-1, 0}, {2, 1})));
  CHECK_THROWS_WITH_AS(g.to_vector<float>(), doctest::Contains("gather on CUDA: index -1"), Error);
  backend(kGpu).synchronize();  // cleared
}

TEST_CASE("random fills give the CPU's numbers for the same seed and advance the generator alike") {
  for (DType dt : {kFloat32, kFloat64}) {
    for (int64_t n : {1, 3, 4, 1001, 100003}) {
      Generator cpu_gen(42), gpu_gen(42);
      Tensor c = empty({n}, {.dtype = dt}), g = empty({n}, {.dtype = dt, .device = kGpu});
      raw::uniform_(c, cpu_gen, -2.0, 5.0);
      raw::uniform_(g, gpu_gen, -2.0, 5.0);
      check_close(c, g, 0, 0, "uniform is bit-identical");
      CHECK(cpu_gen.offset() == gpu_gen.offset());
      raw::normal_(c, cpu_gen, 1.0, 3.0);
      raw::normal_(g, gpu_gen, 1.0, 3.0);
      check_close(c, g, dt == kFloat32 ? 1e-6 : 1e-13, 1e-6, "normal");  // last-bit libm differences
      CHECK(cpu_gen.offset() == gpu_gen.offset());
    }
  }
  // manual_seed gives the same initial weights on either device
  manual_seed(7);
  const Tensor w = rand({4, 10}, default_generator(), {.device = kGpu});
  manual_seed(7);
  check_close(rand({4, 10}, default_generator()), w, 0, 0, "rand");
}

namespace {
struct Mlp : nn::Module {
  Mlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  }
  // x: (B, 10) -> logits (B, 3)
  Tensor forward(const Tensor& x) override { return fc2->forward(fc1->forward(x).relu()); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};
}  // namespace

TEST_CASE("an MLP trains on cuda:0 like on the CPU: losses, gradients, SGD and Adam steps") {
  for (bool adam : {false, true}) {
    manual_seed(3);
    auto cpu_model = std::make_shared<Mlp>();
    manual_seed(3);
    auto gpu_model = std::make_shared<Mlp>();
    gpu_model->to(kGpu);
    std::unique_ptr<optim::Optimizer> cpu_opt, gpu_opt;
    if (adam) {
      cpu_opt = std::make_unique<optim::Adam>(cpu_model->parameters(), optim::AdamOptions{.lr = 0.01});
      gpu_opt = std::make_unique<optim::Adam>(gpu_model->parameters(), optim::AdamOptions{.lr = 0.01});
    } else {
      cpu_opt = std::make_unique<optim::SGD>(cpu_model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
      gpu_opt = std::make_unique<optim::SGD>(gpu_model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    }
    nn::CrossEntropyLoss loss_fn;
    Generator data(5);
    const Tensor x = randn({64, 10}, data);
    const Tensor y = raw::cast(raw::argmax(raw::matmul(x, randn({10, 3}, data)), 1), kInt64);
    const Tensor xg = gpu(x), yg = gpu(y);

    const auto before = cuda::memory_stats(0);
    uint64_t mallocs_after_warmup = 0;
    for (int step = 0; step < 30; ++step) {
      const Tensor lc = loss_fn(cpu_model->forward(x), y);
      const Tensor lg = loss_fn(gpu_model->forward(xg), yg);
      CHECK(lg.device() == kGpu);
      CHECK(lg.item() == doctest::Approx(lc.item()).epsilon(1e-4));
      cpu_opt->zero_grad();
      gpu_opt->zero_grad();
      lc.backward();
      lg.backward();
      if (step == 0) {
        const auto cp = cpu_model->named_parameters(), gp = gpu_model->named_parameters();
        for (size_t i = 0; i < cp.size(); ++i) {
          CHECK(gp[i].second.grad().device() == kGpu);
          check_close(cp[i].second.grad(), gp[i].second.grad(), 1e-4, 1e-5, "grad of " + cp[i].first);
        }
      }
      cpu_opt->step();
      gpu_opt->step();
      if (step == 3) mallocs_after_warmup = cuda::memory_stats(0).raw_allocations;
    }
    // Note [Caching allocator]: the steady state reuses cached blocks only.
    const auto after = cuda::memory_stats(0);
    CHECK(after.raw_allocations == mallocs_after_warmup);
    CHECK(after.cache_hits > before.cache_hits);
    const auto cp = cpu_model->named_parameters(), gp = gpu_model->named_parameters();
    for (size_t i = 0; i < cp.size(); ++i) {
      CHECK(gp[i].second.device() == kGpu);
      check_close(cp[i].second, gp[i].second, 1e-3, 1e-4, std::string(adam ? "adam " : "sgd ") + cp[i].first);
    }
  }
}

TEST_CASE("devices, streams and events") {
  CHECK(cuda::device_count() >= 1);
  CHECK(cuda::properties(0).multiprocessors > 0);
  {
    cuda::DeviceGuard guard(0);
    CHECK(cuda::current_device() == 0);
  }
  CHECK(cuda::current_stream(0) == cuda::current_stream(0));
  CHECK_THROWS_WITH_AS(cuda::set_device(cuda::device_count()), doctest::Contains("does not exist"), Error);
  CHECK_THROWS_WITH_AS(zeros({1}, {.device = cuda_device(cuda::device_count())}), doctest::Contains("does not exist"), Error);
  cuda::Event e(0);
  e.record(cuda::current_stream(0));
  e.synchronize();
  CHECK(e.query());
  const auto s = cuda::memory_stats(0);
  CHECK(s.bytes_reserved >= s.bytes_in_use);
}
