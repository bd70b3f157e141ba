// The CUDA convolution runs over the whole batch (tensor/detail/raw_conv_batched.h): counted by the
// emulator, a forward is one im2col launch and one cuBLAS GEMM whatever the batch size, a backward
// one im2col, one col2im and two GEMMs; and the gradients asked for one at a time equal the CPU's
// per-sample loop. Launch counts are the emulator's, so this case exists only in the emulated build.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tensor/raw_ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace mt;

namespace {

using test::kGpu;
using test::sample;

// Launches of each name while `f` runs, once its work has finished.
template <typename F>
std::vector<int64_t> launches_during(const std::vector<const char*>& names, F f) {
  std::vector<int64_t> before;
  for (const char* n : names) before.push_back(mt_emu::launch_count(n));
  f();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<int64_t> during;
  for (size_t i = 0; i < names.size(); ++i) during.push_back(mt_emu::launch_count(names[i]) - before[i]);
  return during;
}

void check_close(const Tensor& want_t, const Tensor& got_t, double rtol, const std::string& what) {
  INFO(what);
  REQUIRE(got_t.device() == kGpu);
  REQUIRE(want_t.sizes() == got_t.sizes());
  const std::vector<double> want = want_t.to_vector<double>(), got = got_t.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::abs(want[i] - got[i]) > rtol * (1.0 + std::abs(want[i]))) {
      ++bad;
      FAIL_CHECK("element " << i << ": cpu " << want[i] << ", cuda " << got[i]);
    }
  }
}

}  // namespace

TEST_CASE("cuda conv2d: one im2col, col2im and GEMM launch per op over the whole batch") {
  const std::vector<const char*> names = {"im2col_kernel", "col2im_kernel", "cublasGemmStridedBatchedEx"};
  for (int64_t groups : {1, 2}) {
    INFO("groups " << groups);
    const Conv2dOptions o{.stride = 2, .padding = 1, .groups = groups};
    const Tensor x = raw::to_device(sample({5, 4, 7, 6}, kFloat32, 1), kGpu);
    const Tensor w = raw::to_device(sample({6, 4 / groups, 3, 3}, kFloat32, 2), kGpu);
    const Tensor b = raw::to_device(sample({6}, kFloat32, 3), kGpu);
    Tensor y;
    CHECK(launches_during(names, [&] { y = raw::conv2d(x, w, b, o); }) == std::vector<int64_t>{1, 0, 1});
    const Tensor dy = raw::to_device(sample(y.sizes(), kFloat32, 4), kGpu);
    CHECK(launches_during(names, [&] { raw::conv2d_backward(dy, x, w, o, {}); }) == std::vector<int64_t>{1, 1, 2});
    CHECK(launches_during(names, [&] { raw::conv2d_backward(dy, x, w, o, {.dx = true, .dw = false}); }) ==
          std::vector<int64_t>{0, 1, 1});
  }
}

TEST_CASE("cuda conv2d: each gradient alone, and strided 1x1 kernels, equal the CPU's per-sample loop") {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{3, 6, 8, 7}, {4, 3, 3, 3}, {.padding = 1, .dilation = {2, 1}, .groups = 2}},
      {{4, 4, 6, 6}, {6, 4, 1, 1}, {.stride = 2}},  // 1x1 but strided: im2col again
      {{3, 6, 5, 4}, {9, 2, 1, 1}, {.groups = 3}},  // pointwise: x is its own columns
  };
  const raw::Conv2dNeeds alone[] = {{.dx = true, .dw = false, .db = false}, {.dx = false, .dw = true, .db = false},
                               {.dx = false, .dw = false, .db = true}};
  for (const Case& c : cases) {
    const std::string what = c.x.str() + " * " + c.w.str();
    const Tensor x = sample(c.x, kFloat64, 5), w = sample(c.w, kFloat64, 6);
    const Tensor gx = raw::to_device(x, kGpu), gw = raw::to_device(w, kGpu);
    const Tensor y = raw::conv2d(x, w, Tensor(), c.o);
    check_close(y, raw::conv2d(gx, gw, Tensor(), c.o), 1e-12, "conv2d " + what);
    const Tensor dy = sample(y.sizes(), kFloat64, 7), gdy = raw::to_device(dy, kGpu);
    for (const raw::Conv2dNeeds& needs : alone) {
      const raw::Conv2dGrads want = raw::conv2d_backward(dy, x, w, c.o, needs);
      const raw::Conv2dGrads got = raw::conv2d_backward(gdy, gx, gw, c.o, needs);
      CHECK(got.dx.defined() == needs.dx);
      CHECK(got.dw.defined() == needs.dw);
      CHECK(got.db.defined() == needs.db);
      if (needs.dx) check_close(want.dx, got.dx, 1e-12, "dx " + what);
      if (needs.dw) check_close(want.dw, got.dw, 1e-12, "dw " + what);
      if (needs.db) check_close(want.db, got.db, 1e-12, "db " + what);
    }
  }
}
