// The spatial ops of autograd/spatial_ops.h and the new options of conv2d and pooling against central
// finite differences in float64: pad in every mode, unbatched inputs, ceil_mode, adaptive max
// pooling, conv1d, "same" padding, interpolate and conv_transpose2d, over shapes and parameters
// drawn from a seeded generator, non-contiguous inputs included.
#include <doctest/doctest.h>

#include "autograd/detail/reference_ops.h"
#include "minitrain.h"
#include "gradcheck_case.h"
#include "nn/nn.h"

using namespace mt;

namespace {
Generator gen(4040);

Tensor input(const Shape& s) { return (rand(s, gen, {.dtype = kFloat64}) * 2.0 - 1.0).requires_grad_(); }

// An integer in [lo, hi], from gen.
int64_t draw(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rand({1}, gen, {.dtype = kFloat64}).item() * static_cast<double>(hi - lo + 1));
}

const auto check = &test::check_gradcheck;
using V = const std::vector<Tensor>&;
}  // namespace

TEST_CASE("gradcheck: pad in every mode over drawn sizes, on a transposed input too") {
  for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t h = draw(2, 5), w = draw(2, 6);
      const std::vector<int64_t> pads{draw(0, w - 1), draw(0, w - 1), draw(0, h - 1), draw(0, h - 1)};
      CAPTURE(static_cast<int>(mode));
      CAPTURE(pads[0]);
      CAPTURE(pads[2]);
      check([&](V x) { return pad(x[0], pads, {.mode = mode, .value = 0.3}); }, {input({2, 2, h, w})});
      check([&](V x) { return pad(x[0].transpose(-1, -2), {pads[2], pads[3]}, {.mode = mode}); }, {input({2, w, h})});
    }
  }
  check([](V x) { return pad(x[0], {-1, 2, 1, -1}); }, {input({2, 4, 5})});  // crops
}

TEST_CASE("gradcheck: unbatched conv2d and pooling, ceil_mode") {
  check([](V p) { return conv2d(p[0], p[1], p[2], {.stride = 2, .padding = 1}); },
        {input({3, 6, 5}), input({2, 3, 3, 3}), input({2})});
  for (bool ceil : {false, true}) {
    CAPTURE(ceil);
    check([&](V x) { return max_pool2d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = ceil}); },
          {input({2, 6, 8})});
    check([&](V x) { return max_pool2d(x[0], {.kernel_size = 2, .stride = 2, .ceil_mode = ceil}); }, {input({1, 2, 5, 7})});
    for (bool include : {true, false})
      check([&](V x) {
        return avg_pool2d(x[0], {.kernel_size = {3, 2}, .stride = 2, .padding = 1, .count_include_pad = include,
                                 .ceil_mode = ceil});
      }, {input({2, 2, 6, 7})});
  }
  check([](V x) { return adaptive_avg_pool2d(x[0], {2, 3}); }, {input({2, 5, 7})});
}

TEST_CASE("gradcheck: adaptive max pooling, bins overlapping, larger than the input, global") {
  for (Size2 out : {Size2(3, 4), Size2(1), Size2(6, 7)})
    check([&](V x) { return adaptive_max_pool2d(x[0], out); }, {input({2, 3, 5, 6})});
  check([](V x) { return adaptive_max_pool2d(x[0].transpose(-1, -2), {2, 3}); }, {input({2, 7, 5})});
}

TEST_CASE("gradcheck: conv1d, and conv2d and conv1d with padding same") {
  check([](V p) { return conv1d(p[0], p[1], p[2], {.stride = 2, .padding = 1, .dilation = 2, .groups = 2}); },
        {input({2, 4, 9}), input({4, 2, 3}), input({4})});
  check([](V p) { return conv1d(p[0], p[1]); }, {input({3, 7}), input({2, 3, 2})});
  check([](V p) { return nn::F::conv2d(p[0], p[1], p[2], {.padding = nn::kSame, .dilation = {1, 2}}); },
        {input({1, 2, 5, 6}), input({3, 2, 4, 3}), input({3})});
  check([](V p) { return nn::F::conv1d(p[0], p[1], {}, {.padding = nn::kSame}); }, {input({2, 2, 6}), input({2, 2, 4})});
}

TEST_CASE("gradcheck: interpolate, nearest and bilinear with and without align_corners") {
  check([](V x) { return interpolate(x[0], {.size = {5, 7}}); }, {input({1, 2, 3, 4})});
  check([](V x) { return interpolate(x[0], {.scale_factor = {1.5, 0.5}}); }, {input({1, 2, 4, 6})});
  for (bool ac : {false, true}) {
    CAPTURE(ac);
    check([&](V x) { return interpolate(x[0], {.size = {5, 3}, .mode = InterpolateMode::Bilinear, .align_corners = ac}); },
          {input({2, 1, 3, 4})});
    check([&](V x) {
      return interpolate(x[0].transpose(-1, -2), {.scale_factor = 2, .mode = InterpolateMode::Bilinear, .align_corners = ac});
    }, {input({1, 2, 3, 4})});
  }
}

TEST_CASE("bilinear interpolate's kernel equals its composition (Note [Bilinear by a kernel]), values and gradients") {
  for (DType dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-13 : 1e-5;
    for (int trial = 0; trial < 8; ++trial) {
      const bool ac = trial % 2 == 1, by_size = trial % 4 < 2;
      const Shape shape{draw(1, 2), draw(1, 3), draw(2, 9), draw(2, 9)};
      CAPTURE(trial);
      CAPTURE(shape);
      const InterpolateOptions o = by_size ? InterpolateOptions{.size = {draw(1, 12), draw(1, 12)}}
                                           : InterpolateOptions{.scale_factor = {0.5 + 0.3 * static_cast<double>(draw(0, 8)),
                                                                                 0.5 + 0.3 * static_cast<double>(draw(0, 8))}};
      InterpolateOptions bilinear = o;
      bilinear.mode = InterpolateMode::Bilinear, bilinear.align_corners = ac;
      const Tensor x = input(shape).detach().to(dtype);
      const Tensor a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
      const Tensor ya = interpolate(trial % 3 == 0 ? a.transpose(-1, -2) : a, bilinear);
      const Tensor yb = reference::interpolate(trial % 3 == 0 ? b.transpose(-1, -2) : b, bilinear);
      REQUIRE(ya.sizes() == yb.sizes());
      CHECK((ya - yb).abs().max().item() <= tol);
      const Tensor gy = randn(ya.sizes(), gen, {.dtype = dtype});
      (ya * gy).sum().backward();
      (yb * gy).sum().backward();
      CHECK((a.grad() - b.grad()).abs().max().item() <= tol * 10);
    }
  }
}

TEST_CASE("gradcheck: conv_transpose2d over drawn stride, padding, output_padding, dilation and groups") {
  for (int trial = 0; trial < 6; ++trial) {
    const Size2 stride{draw(1, 3), draw(1, 3)}, kernel{draw(1, 3), draw(1, 3)};
    const Size2 dilation{draw(1, 2), draw(1, 2)};
    const Size2 padding{draw(0, dilation.h * (kernel.h - 1) / 2), draw(0, dilation.w * (kernel.w - 1) / 2)};
    const Size2 output_padding{draw(0, stride.h - 1), draw(0, stride.w - 1)};
    const int64_t groups = draw(1, 2);
    const ConvTranspose2dOptions o{.stride = stride, .padding = padding, .output_padding = output_padding,
                                   .groups = groups, .dilation = dilation};
    CAPTURE(stride);
    CAPTURE(kernel);
    CAPTURE(padding);
    CAPTURE(output_padding);
    CAPTURE(dilation);
    CAPTURE(groups);
    check([&](V p) { return conv_transpose2d(p[0], p[1], p[2], o); },
          {input({2, 2 * groups, 3, 4}), input({2 * groups, 3, kernel.h, kernel.w}), input({3 * groups})});
  }
  check([](V p) { return conv_transpose2d(p[0].transpose(-1, -2), p[1], {}, {.stride = 2}); },
        {input({2, 4, 3}), input({2, 3, 2, 2})});  // unbatched, non-contiguous
}
