// The sliding-window raw ops against the definitions written as plain loops: conv2d (im2col + GEMM)
// over stride/padding/dilation/groups, max pooling and its indices, fold as unfold's adjoint, cat.
// And their argument checks: one clear error per kind of bad input, and the bound on the columns
// buffers the threads hold at once.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "minitrain.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {
Generator gen(5);

// y[n, o, oh, ow] = b[o] + Σ_{c in o's group, i, j} x[n, c, oh·s - p + i·d, ow·s - p + j·d]·w[o, c', i, j]
std::vector<double> conv_reference(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Conv2dOptions& o) {
  const auto x = xt.to_vector<double>(), w = wt.to_vector<double>();
  const auto b = bt.defined() ? bt.to_vector<double>() : std::vector<double>(wt.size(0), 0.0);
  const int64_t n = xt.size(0), c = xt.size(1), h = xt.size(2), wd = xt.size(3);
  const int64_t oc = wt.size(0), cg = wt.size(1), kh = wt.size(2), kw = wt.size(3), og = oc / o.groups;
  const int64_t oh_n = (h + 2 * o.padding.h - o.dilation.h * (kh - 1) - 1) / o.stride.h + 1;
  const int64_t ow_n = (wd + 2 * o.padding.w - o.dilation.w * (kw - 1) - 1) / o.stride.w + 1;
  std::vector<double> y;
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t oi = 0; oi < oc; ++oi)
      for (int64_t a = 0; a < oh_n; ++a)
        for (int64_t bcol = 0; bcol < ow_n; ++bcol) {
          double acc = b[oi];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = a * o.stride.h - o.padding.h + i * o.dilation.h;
                const int64_t iw = bcol * o.stride.w - o.padding.w + j * o.dilation.w;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const int64_t channel = (oi / og) * cg + ci;
                acc += x[((ni * c + channel) * h + ih) * wd + iw] * w[((oi * cg + ci) * kh + i) * kw + j];
              }
          y.push_back(acc);
        }
  return y;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol).scale(1.0));
  }
}
}  // namespace

TEST_CASE("conv2d equals its definition over stride, padding, dilation and groups") {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {.stride = 2, .padding = 1}},
      {{1, 2, 9, 8}, {3, 2, 3, 2}, {.stride = {2, 1}, .padding = {0, 3}, .dilation = {2, 3}}},
      {{2, 6, 5, 5}, {4, 3, 3, 3}, {.padding = 1, .groups = 2}},
      {{3, 4, 6, 6}, {8, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 4}},
      {{1, 8, 3, 3}, {16, 8, 1, 1}, {}},  // pointwise (no im2col), large enough for the BLAS path
      {{2, 6, 4, 5}, {4, 3, 1, 1}, {.groups = 2}},  // pointwise with groups
      {{2, 3, 5, 5}, {4, 3, 1, 1}, {.stride = 2}},  // 1x1 but strided: im2col again
  };
  for (const DType dt : {kFloat32, kFloat64}) {
    for (const Case& c : cases) {
      CAPTURE(c.x);
      CAPTURE(c.w);
      const Tensor x = randn(c.x, gen, {.dtype = dt}), w = randn(c.w, gen, {.dtype = dt});
      const Tensor b = randn({c.w[0]}, gen, {.dtype = dt});
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      check_close(raw::conv2d(x, w, b, c.o).to_vector<double>(), conv_reference(x, w, b, c.o), tol);
      check_close(raw::conv2d(x, w, Tensor(), c.o).to_vector<double>(), conv_reference(x, w, Tensor(), c.o), tol);
    }
  }
}

TEST_CASE("fold is the adjoint of unfold: <unfold(x), c> = <x, fold(c)>") {
  const UnfoldOptions o{.kernel_size = {3, 2}, .dilation = {1, 2}, .padding = 1, .stride = {2, 1}};
  const Tensor x = randn({2, 3, 6, 5}, gen, {.dtype = kFloat64});
  const Tensor cols = raw::unfold(x, o);
  const Tensor c = randn(cols.sizes(), gen, {.dtype = kFloat64});
  const double lhs = (cols * c).sum().item(), rhs = (x * raw::fold(c, {6, 5}, o)).sum().item();
  CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  // Non-overlapping 2x2 blocks: fold(unfold(x)) is x itself.
  const Tensor y = randn({1, 2, 4, 6}, gen);
  const UnfoldOptions blocks{.kernel_size = 2, .stride = 2};
  CHECK(raw::fold(raw::unfold(y, blocks), {4, 6}, blocks).to_vector<float>() == y.to_vector<float>());
}

// Note [Samples on the threads] (tensor/detail/raw_split.h): samples run on the threads with a columns
// buffer each only while the threads' buffers together stay small; here one sample's columns are
// 52 MB (8 channels · 25 taps · 256² positions), so 2 threads must still run the samples in order,
// and the conv's memory must not grow with the thread count.
TEST_CASE("conv2d's memory does not grow with the threads when one sample's columns are large") {
  const Tensor x = randn({4, 8, 256, 256}, gen), w = randn({8, 8, 5, 5}, gen);
  const double cols_bytes = 8.0 * 25 * 256 * 256 * 4, y_bytes = 4.0 * 8 * 256 * 256 * 4;
  NumThreadsGuard guard(2);
  NoGradGuard no_grad;
  reset_cpu_peak_memory();
  const size_t before = cpu_memory_stats().bytes_in_use;
  const Tensor y = conv2d(x, w, Tensor(), {.padding = 2});
  const double grew = static_cast<double>(cpu_memory_stats().peak_bytes_in_use - before);
  CHECK(y.sizes() == Shape{4, 8, 256, 256});
  CHECK(grew >= y_bytes + cols_bytes);        // the output and one columns buffer...
  CHECK(grew < y_bytes + 1.5 * cols_bytes);   // ...and not one per thread
}

TEST_CASE("max_pool2d: values, argmax indices, -inf padding, NaN") {
  // One 4x4 plane 0..15: 2x2 windows take their bottom-right element.
  const Tensor x = arange(0.0, 16.0, 1.0).view({1, 1, 4, 4});
  const raw::MaxPool2dResult r = raw::max_pool2d(x, {.kernel_size = 2});
  CHECK(r.out.to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  CHECK(r.indices.to_vector<int64_t>() == std::vector<int64_t>{5, 7, 13, 15});
  // Padding is -inf: an all-negative input's border windows still take a real element.
  const Tensor neg = -(x + 1.0);  // -1 .. -16
  const raw::MaxPool2dResult p = raw::max_pool2d(neg, {.kernel_size = 3, .stride = 2, .padding = 1});
  CHECK(p.out.to_vector<float>() == std::vector<float>{-1, -2, -5, -6});
  CHECK(p.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 4, 5});
  // A NaN in the window wins.
  Tensor with_nan = x.clone();
  with_nan.view({16}).narrow(0, 6, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  CHECK(std::isnan(raw::max_pool2d(with_nan, {.kernel_size = 2}).out.to_vector<float>()[1]));
}

TEST_CASE("cat joins along a dim, with strided inputs") {
  const Tensor a = arange(0.0, 6.0, 1.0).view({2, 3});
  const Tensor b = arange(6.0, 10.0, 1.0).view({2, 2}).t();  // (2, 2) transposed
  CHECK(raw::cat({a, b}, 1).to_vector<float>() == std::vector<float>{0, 1, 2, 6, 8, 3, 4, 5, 7, 9});
  CHECK(raw::cat({a, a}, 0).sizes() == Shape({4, 3}));
}

TEST_CASE("sliding windows and cat reject bad input with one clear error") {
  const Tensor x = zeros({1, 2, 3, 3});
  CHECK_THROWS_WITH(raw::conv2d(x, zeros({4, 2, 5, 5}), Tensor(), {}),
                    doctest::Contains("kernel 5x5 (5x5 with dilation) is larger than the padded input 3x3"));
  CHECK_THROWS_WITH(raw::conv2d(x, zeros({4, 2, 3, 3}), Tensor(), {.dilation = 2}),
                    doctest::Contains("larger than the padded input"));
  CHECK_THROWS_WITH(raw::conv2d(x, zeros({4, 3, 1, 1}), Tensor(), {}), doctest::Contains("has 2 channels"));
  CHECK_THROWS_WITH(raw::conv2d(zeros({2, 3, 3}), zeros({4, 2, 1, 1}), Tensor(), {}),
                    doctest::Contains("must be 4-D (N, C, H, W), got shape [2, 3, 3]"));
  CHECK_THROWS_WITH(raw::conv2d(x, zeros({3, 1, 1, 1}), Tensor(), {.groups = 2}), doctest::Contains("groups = 2"));
  CHECK_THROWS_WITH(raw::conv2d(x, zeros({4, 2, 1, 1}), Tensor(), {.stride = 0}),
                    doctest::Contains("stride must be positive"));
  CHECK_THROWS_WITH(raw::max_pool2d(x, {.kernel_size = 4}), doctest::Contains("larger than the padded input"));
  CHECK_THROWS_WITH(raw::max_pool2d(x, {.kernel_size = 2, .padding = 2}), doctest::Contains("at most half"));
  CHECK_THROWS_WITH(raw::cat({zeros({2, 3}), zeros({3, 2})}, 0), doctest::Contains("in every dim but 0"));
  CHECK_THROWS_WITH(raw::fold(zeros({1, 5, 4}), {3, 3}, {.kernel_size = 2}), doctest::Contains("multiple"));
}
