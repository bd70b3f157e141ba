// The spatial ops of issue 40 on CUDA against the CPU, values and the gradients of every input, in
// float64 and float32: pad in every mode, unbatched conv2d and pooling, ceil_mode (the max_pool2d and
// im2col kernels over windows that overhang the input), adaptive max pooling, conv1d, padding="same",
// interpolate and conv_transpose2d (conv2d's batched input-gradient path with a placeholder input).
// Needs a GPU (tests/cuda/main.cpp skips otherwise; the emulator runs it anywhere).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "minitrain.h"
#include "nn/nn.h"
#include "tensor/raw_ops.h"
#include "cuda_compare.h"

using namespace mt;

namespace {

using test::gpu;
using test::kGpu;
using test::sample;

using test::check_close;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f over inputs of these shapes (input 0 transposed in its last two dims when `transpose`), and the
// gradients of sum(f·gy) in every input, on the CPU and on cuda:0, compared.
void check_op(const std::string& what, const Fn& f, const std::vector<Shape>& shapes, bool transpose = false) {
  for (DType dt : {kFloat64, kFloat32}) {
    const double tol = dt == kFloat32 ? 1e-4 : 1e-11;
    std::vector<Tensor> cpu_in, gpu_in;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor v = sample(shapes[i], dt, 10 + i);
      cpu_in.push_back(v.clone().requires_grad_());
      gpu_in.push_back(gpu(v).requires_grad_());
    }
    const auto run = [&](std::vector<Tensor> in) {
      if (transpose) in[0] = in[0].transpose(-1, -2);
      return f(in);
    };
    const Tensor want = run(cpu_in), got = run(gpu_in);
    check_close(want, got, tol, what + ": value");
    const Tensor gy = sample(want.sizes(), dt, 99);
    (want * gy).sum().backward();
    (got * gpu(gy)).sum().backward();
    for (size_t i = 0; i < shapes.size(); ++i)
      check_close(cpu_in[i].grad(), gpu_in[i].grad(), tol * 10, what + ": gradient in input " + std::to_string(i));
  }
}

}  // namespace

TEST_CASE("cuda: pad in every mode matches the CPU") {
  for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const std::string name = "pad mode " + std::to_string(static_cast<int>(mode));
    check_op(name, [&](const std::vector<Tensor>& p) { return pad(p[0], {1, 3, 2, 0}, {.mode = mode, .value = 0.5}); },
             {{2, 3, 5, 6}}, /*transpose=*/true);
    check_op(name + " 1-D", [&](const std::vector<Tensor>& p) { return pad(p[0], {2, 2}, {.mode = mode}); }, {{2, 3, 7}});
  }
  check_op("pad crop", [](const std::vector<Tensor>& p) { return pad(p[0], {-1, 2, 0, -2}); }, {{2, 3, 5, 6}});
}

TEST_CASE("cuda: ceil_mode pooling, unbatched inputs and adaptive max pooling match the CPU") {
  for (bool ceil : {false, true}) {
    const std::string tag = ceil ? " ceil" : "";
    check_op("max_pool2d" + tag, [&](const std::vector<Tensor>& p) {
      return max_pool2d(p[0], {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = ceil});
    }, {{2, 3, 8, 9}});
    check_op("max_pool2d plain" + tag, [&](const std::vector<Tensor>& p) {
      return max_pool2d(p[0], {.kernel_size = 2, .ceil_mode = ceil});
    }, {{2, 3, 7, 9}});
    for (bool include : {true, false})
      check_op("avg_pool2d" + tag, [&](const std::vector<Tensor>& p) {
        return avg_pool2d(p[0], {.kernel_size = {3, 2}, .stride = 2, .padding = 1, .count_include_pad = include,
                                 .ceil_mode = ceil});
      }, {{2, 3, 8, 7}}, /*transpose=*/true);
  }
  const auto [y, indices] = max_pool2d_with_indices(gpu(sample({2, 3, 7, 8}, kFloat32, 5)),
                                                    {.kernel_size = 2, .ceil_mode = true});
  CHECK(indices.to_vector<int64_t>() ==
        max_pool2d_with_indices(sample({2, 3, 7, 8}, kFloat32, 5), {.kernel_size = 2, .ceil_mode = true})
            .second.to_vector<int64_t>());
  CHECK(y.sizes() == Shape{2, 3, 4, 4});
  check_op("unbatched conv2d", [](const std::vector<Tensor>& p) { return conv2d(p[0], p[1], p[2], {.padding = 1}); },
           {{3, 6, 5}, {4, 3, 3, 3}, {4}});
  check_op("unbatched max_pool2d", [](const std::vector<Tensor>& p) { return max_pool2d(p[0], {.kernel_size = 2}); },
           {{3, 6, 5}});
  for (Size2 out : {Size2(3, 4), Size2(1), Size2(8, 9)})
    check_op("adaptive_max_pool2d", [&](const std::vector<Tensor>& p) { return adaptive_max_pool2d(p[0], out); },
             {{2, 3, 7, 6}}, /*transpose=*/true);
  const Tensor x = sample({2, 3, 7, 6}, kFloat64, 6);
  CHECK(adaptive_max_pool2d_with_indices(gpu(x), {3, 4}).second.to_vector<int64_t>() ==
        adaptive_max_pool2d_with_indices(x, {3, 4}).second.to_vector<int64_t>());
}

TEST_CASE("cuda: conv1d, padding same and modes, interpolate and conv_transpose2d match the CPU") {
  check_op("conv1d", [](const std::vector<Tensor>& p) {
    return conv1d(p[0], p[1], p[2], {.stride = 2, .padding = 1, .dilation = 2, .groups = 2});
  }, {{2, 4, 11}, {6, 2, 3}, {6}});
  check_op("conv2d same", [](const std::vector<Tensor>& p) {
    return nn::F::conv2d(p[0], p[1], p[2], {.padding = nn::kSame, .dilation = {1, 2}});
  }, {{2, 3, 6, 7}, {4, 3, 4, 3}, {4}});
  check_op("interpolate nearest", [](const std::vector<Tensor>& p) { return interpolate(p[0], {.scale_factor = {1.7, 2}}); },
           {{2, 3, 4, 5}});
  for (bool ac : {false, true})
    check_op("interpolate bilinear", [&](const std::vector<Tensor>& p) {
      return interpolate(p[0], {.size = {7, 3}, .mode = InterpolateMode::Bilinear, .align_corners = ac});
    }, {{2, 3, 4, 5}}, /*transpose=*/true);
  check_op("conv_transpose2d", [](const std::vector<Tensor>& p) {
    return conv_transpose2d(p[0], p[1], p[2], {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  }, {{2, 4, 5, 6}, {4, 3, 3, 3}, {6}});
  check_op("conv_transpose2d unbatched", [](const std::vector<Tensor>& p) {
    return conv_transpose2d(p[0], p[1], {}, {.stride = {1, 2}, .dilation = 2});
  }, {{3, 4, 5}, {3, 2, 2, 3}}, /*transpose=*/true);
}

TEST_CASE("cuda: Conv2d with reflect same padding, ConvTranspose2d and AdaptiveMaxPool2d train a step as on the CPU") {
  const auto make = [] {
    manual_seed(12);
    return std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dLayerOptions{.padding = nn::kSame,
                                                                     .padding_mode = nn::PaddingMode::Reflect}),
        std::make_shared<nn::ConvTranspose2d>(4, 2, 2, nn::ConvTranspose2dLayerOptions{.stride = 2}),
        std::make_shared<nn::AdaptiveMaxPool2d>(Size2{3, 5}), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(30, 2));
  };
  auto cpu_model = make(), gpu_model = make();
  gpu_model->to(kGpu);
  const Tensor x = sample({3, 3, 6, 5}, kFloat32, 8);
  pow(cpu_model->forward(x), 2.0).sum().backward();
  pow(gpu_model->forward(gpu(x)), 2.0).sum().backward();
  const NamedTensors want = cpu_model->named_parameters(), got = gpu_model->named_parameters();
  for (size_t i = 0; i < want.size(); ++i) check_close(want[i].second.grad(), got[i].second.grad(), 1e-4, want[i].first);
}
