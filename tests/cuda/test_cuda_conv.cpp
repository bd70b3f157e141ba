// The CNN ops on CUDA against the CPU backend: unfold/fold (the im2col/col2im kernels), conv2d
// forward and backward (those kernels plus cuBLAS), max pooling values and indices, cat, and a
// Conv2d + BatchNorm2d + pooling training step. Needs a GPU (tests/cuda/main.cpp skips with 77).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tensor/raw_ops.h"
#include "cuda_test_util.h"

using namespace mt;

namespace {

using test::gpu;
using test::kGpu;
using test::sample;

void check_close(const Tensor& want_t, const Tensor& got_t, double rtol, const std::string& what) {
  INFO(what);
  REQUIRE(got_t.device() == kGpu);
  REQUIRE(want_t.sizes() == got_t.sizes());
  const std::vector<double> want = want_t.to_vector<double>(), got = got_t.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const bool same_nan = std::isnan(want[i]) && std::isnan(got[i]);
    if (!same_nan && std::abs(want[i] - got[i]) > rtol * (1.0 + std::abs(want[i]))) {
      ++bad;
      FAIL_CHECK("element " << i << ": cpu " << want[i] << ", cuda " << got[i]);
    }
  }
}

}  // namespace

TEST_CASE("cuda: unfold, fold, conv2d and its backward equal the CPU's") {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {}},
      {{2, 3, 9, 8}, {4, 3, 3, 2}, {.stride = 2, .padding = 1}},
      {{1, 4, 11, 10}, {6, 2, 3, 3}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = 2, .groups = 2}},
      {{64, 16, 28, 28}, {32, 16, 3, 3}, {.padding = 1}},  // many blocks: the grid-stride loops
      {{3, 8, 5, 6}, {4, 4, 1, 1}, {.groups = 2}},           // pointwise: no im2col
  };
  for (DType dt : {kFloat32, kFloat64}) {
    const double rtol = dt == kFloat32 ? 1e-4 : 1e-10;
    for (const Case& c : cases) {
      const std::string what = c.x.str() + " * " + c.w.str();
      const Tensor x = sample(c.x, dt, 1), w = sample(c.w, dt, 2), b = sample({c.w[0]}, dt, 3);
      const UnfoldOptions uo{.kernel_size = {c.w[2], c.w[3]}, .dilation = c.o.dilation, .padding = c.o.padding,
                             .stride = c.o.stride};
      const Tensor cols = raw::unfold(x, uo);
      check_close(cols, raw::unfold(gpu(x), uo), rtol, "unfold " + what);
      check_close(raw::fold(cols, {c.x[2], c.x[3]}, uo), raw::fold(gpu(cols), {c.x[2], c.x[3]}, uo), rtol, "fold " + what);
      const Tensor y = raw::conv2d(x, w, b, c.o);
      check_close(y, raw::conv2d(gpu(x), gpu(w), gpu(b), c.o), rtol, "conv2d " + what);
      const Tensor dy = sample(y.sizes(), dt, 4);
      const raw::Conv2dGrads want = raw::conv2d_backward(dy, x, w, c.o, {});
      const raw::Conv2dGrads got = raw::conv2d_backward(gpu(dy), gpu(x), gpu(w), c.o, {});
      check_close(want.dx, got.dx, rtol, "dx " + what);
      check_close(want.dw, got.dw, rtol * 10, "dw " + what);  // long sums: a different order
      check_close(want.db, got.db, rtol * 10, "db " + what);
    }
  }
}

TEST_CASE("cuda: max_pool2d values and indices, padding and NaN, equal the CPU's") {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = sample({3, 5, 13, 12}, dt, 5);
    raw::fill_(raw::narrow(raw::view(x, {-1}), 0, 100, 1), std::numeric_limits<double>::quiet_NaN());
    for (const Pool2dOptions& o : {Pool2dOptions{.kernel_size = 2}, Pool2dOptions{.kernel_size = 3, .stride = 2, .padding = 1},
                                   Pool2dOptions{.kernel_size = {2, 3}, .stride = 1, .dilation = {2, 1}}}) {
      const raw::MaxPool2dResult want = raw::max_pool2d(x, o), got = raw::max_pool2d(gpu(x), o);
      check_close(want.out, got.out, 0, "max_pool2d values");
      CHECK(want.indices.to_vector<int64_t>() == got.indices.to_vector<int64_t>());
    }
  }
  const Tensor a = sample({2, 3}, kFloat32, 6), b = sample({2, 5}, kFloat32, 7);
  check_close(raw::cat({a, b}, 1), raw::cat({gpu(a), gpu(b)}, 1), 0, "cat");
}

TEST_CASE("cuda: a Conv2d + BatchNorm2d + pooling training step equals the CPU's") {
  const auto make = [] {
    manual_seed(11);
    return std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dLayerOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(8),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::AvgPool2d>(2),
        std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(8, 4));
  };
  auto cpu_model = make(), gpu_model = make();
  gpu_model->to(kGpu);
  const Tensor x = sample({6, 3, 12, 12}, kFloat32, 8);
  const Tensor target = from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1}, {6});
  nn::CrossEntropyLoss loss_fn;
  loss_fn(cpu_model->forward(x), target).backward();
  loss_fn(gpu_model->forward(gpu(x)), gpu(target)).backward();
  const NamedTensors want = cpu_model->named_parameters(), got = gpu_model->named_parameters();
  for (size_t i = 0; i < want.size(); ++i) check_close(want[i].second.grad(), got[i].second.grad(), 1e-4, want[i].first);
  const NamedTensors want_b = cpu_model->named_buffers(), got_b = gpu_model->named_buffers();
  for (size_t i = 0; i < want_b.size(); ++i) check_close(want_b[i].second, got_b[i].second, 1e-5, want_b[i].first);
}
