// Winograd F(2x2, 3x3) (tensor/raw_winograd.cpp) against the im2col + GEMM convolution it replaces
// (raw::conv2d_im2col and conv2d_backward_im2col, themselves tested against the definition in
// test_conv.cpp): the forward and both gradients over paddings 0..2, odd and even sizes (partial
// tiles), sample groups that do not divide the batch, with and without bias; and which layers
// conv2d sends to it.
#include <doctest/doctest.h>

#include <cmath>

#include "minitrain.h"
#include "tests/tensor/relative_error.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {
Generator gen(12);

using test::relative_error;
}  // namespace

TEST_CASE("Winograd conv2d and its gradients equal im2col + GEMM") {
  struct Case {
    Shape x;
    int64_t out;
    Size2 padding;
  };
  const Case cases[] = {
      {{2, 16, 8, 8}, 16, 1},        // even output: whole tiles
      {{3, 16, 7, 9}, 20, 1},        // odd output sizes: the last tile row and column are cut
      {{2, 17, 6, 5}, 16, 0},        // no padding (output 4x3)
      {{2, 16, 5, 6}, 18, 2},        // padding 2: the input gradient's padding is 0
      {{2, 16, 3, 3}, 16, {0, 2}},   // output 1x5: one row of tiles, half of it cut
      {{13, 16, 4, 4}, 16, 1},       // 4 tiles a sample: 64 samples a GEMM group, the batch in one
      {{70, 16, 2, 2}, 16, 1},       // 1 tile a sample: a full group of 256 would need more; 70 in one
      {{300, 16, 1, 1}, 16, 1},      // 1x1 images: groups of 256 and a remainder of 44
  };
  for (const DType dt : {kFloat32, kFloat64}) {
    const double tol = dt == kFloat32 ? 2e-6 : 1e-13;
    for (const Case& c : cases) {
      CAPTURE(c.x);
      CAPTURE(c.padding);
      const Tensor x = randn(c.x, gen, {.dtype = dt});
      const Tensor w = randn({c.out, c.x[1], 3, 3}, gen, {.dtype = dt});
      const Tensor b = randn({c.out}, gen, {.dtype = dt});
      const Conv2dOptions o{.padding = c.padding};
      REQUIRE(raw::winograd_applies(x, w, o));
      CHECK(relative_error(raw::conv2d_winograd(x, w, b, o), raw::conv2d_im2col(x, w, b, o)) < tol);
      CHECK(relative_error(raw::conv2d_winograd(x, w, Tensor(), o), raw::conv2d_im2col(x, w, Tensor(), o)) < tol);
      const Tensor y = raw::conv2d_im2col(x, w, b, o);
      const Tensor dy = randn(y.sizes(), gen, {.dtype = dt});
      const raw::Conv2dGrads want = raw::conv2d_backward_im2col(dy, x, w, o, {});
      CHECK(relative_error(raw::conv2d_input_grad_winograd(dy, w, o), want.dx) < tol);
      CHECK(relative_error(raw::conv2d_weight_grad_winograd(dy, x, w, o), want.dw) < tol);
      // And conv2d / conv2d_backward, which choose it for these layers, give the same.
      CHECK(relative_error(raw::conv2d(x, w, b, o), raw::conv2d_winograd(x, w, b, o)) == 0);
      const raw::Conv2dGrads g = raw::conv2d_backward(dy, x, w, o, {});
      CHECK(relative_error(g.dx, raw::conv2d_input_grad_winograd(dy, w, o)) == 0);
      CHECK(relative_error(g.dw, raw::conv2d_weight_grad_winograd(dy, x, w, o)) == 0);
      CHECK(relative_error(g.db, want.db) == 0);
    }
  }
}

TEST_CASE("Winograd takes non-contiguous inputs and weights") {
  const Tensor x = raw::transpose(randn({2, 16, 9, 7}, gen), 2, 3);  // (2, 16, 7, 9), strided
  const Tensor w = raw::transpose(randn({16, 16, 3, 3}, gen), 0, 1);
  const Conv2dOptions o{.padding = 1};
  CHECK(relative_error(raw::conv2d_winograd(x, w, Tensor(), o), raw::conv2d_im2col(x, w, Tensor(), o)) < 2e-6);
  const Tensor dy = raw::transpose(randn({2, 16, 9, 7}, gen), 2, 3);
  const Tensor dx = raw::conv2d_backward_im2col(dy, x, w, o, {.dx = true, .dw = false, .db = false}).dx;
  CHECK(relative_error(raw::conv2d_input_grad_winograd(dy, w, o), dx) < 2e-6);
  const Tensor dw = raw::conv2d_backward_im2col(dy, x, w, o, {.dx = false, .dw = true, .db = false}).dw;
  CHECK(relative_error(raw::conv2d_weight_grad_winograd(dy, x, w, o), dw) < 2e-6);
}

TEST_CASE("conv2d uses Winograd only for 3x3 stride-1 layers without dilation or groups, with 16+ channels") {
  const Tensor x = randn({1, 16, 6, 6}, gen), w = randn({16, 16, 3, 3}, gen);
  CHECK(raw::winograd_applies(x, w, {.padding = 1}));
  CHECK_FALSE(raw::winograd_applies(x, w, {.stride = 2, .padding = 1}));
  CHECK_FALSE(raw::winograd_applies(x, w, {.padding = 2, .dilation = 2}));
  CHECK_FALSE(raw::winograd_applies(x, w, {.padding = 3}));  // the input gradient's padding would be -1
  CHECK_FALSE(raw::winograd_applies(x, randn({16, 8, 3, 3}, gen), {.groups = 2}));
  CHECK_FALSE(raw::winograd_applies(x, randn({16, 16, 5, 5}, gen), {}));
  CHECK_FALSE(raw::winograd_applies(randn({1, 1, 6, 6}, gen), randn({32, 1, 3, 3}, gen), {.padding = 1}));
  CHECK_FALSE(raw::winograd_applies(x, randn({8, 16, 3, 3}, gen), {.padding = 1}));
  CHECK_THROWS_WITH_AS(raw::conv2d_winograd(x, w, Tensor(), {.stride = 2}),
                       doctest::Contains("conv2d_winograd: needs a 3x3 stride-1"), Error);
}
