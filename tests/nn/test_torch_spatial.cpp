// The spatial ops of issue 40 against PyTorch 1.13 in float64: pad, unbatched conv2d and pooling, the
// padding modes and padding="same", pooling ceil_mode, adaptive max pooling, conv1d, interpolate and
// conv_transpose2d. Each value and the gradients of sum(y * gy) in every input agree to 1e-9
// relative. The reference values are in tests/nn/fixtures/spatial.safetensors, written by
// tests/nn/make_spatial_fixtures.py; a case named "..._t" runs on its x transposed in the last two
// dims, a non-contiguous view, on both sides.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "minitrain.h"
#include "nn/nn.h"
#include "torch_fixtures.h"

using namespace mt;

namespace {

const test::TorchFixtures fx("spatial.safetensors");
bool has(const std::string& name) { return fx.has(name); }
const auto check_close = test::check_close_to_torch;

// The case's `inputs` (those it has of x, w, b) as leaves; f gets x (transposed for "_t"), w and b
// (undefined where absent). Checks y and the gradient of every input.
using Inputs = const std::map<std::string, Tensor>&;
void check_case(const std::string& name, const std::function<Tensor(Inputs)>& f,
                std::vector<std::string> inputs = {"x", "w", "b"}) {
  CAPTURE(name);
  std::map<std::string, Tensor> leaves, args;
  for (const std::string& input : inputs)
    if (has(name + "." + input)) leaves[input] = fx(name + "." + input).clone().requires_grad_();
  args = leaves;
  args["b"] = leaves.count("b") ? leaves["b"] : Tensor();
  args["w"] = leaves.count("w") ? leaves["w"] : Tensor();
  const bool transposed = name.size() > 2 && name.substr(name.size() - 2) == "_t";
  if (transposed) args["x"] = leaves["x"].transpose(-1, -2);
  const Tensor y = f(args);
  check_close(y, fx(name + ".y"), name + ": value");
  (y * fx(name + ".gy")).sum().backward();
  for (auto& [input, leaf] : leaves) check_close(leaf.grad(), fx(name + ".grad_" + input), name + ": gradient in " + input);
}

// A layer's weight and bias set to the case's leaves' values, and their gradients checked after.
template <typename Layer>
void check_layer(const std::string& name, Layer& layer) {
  layer.to(kFloat64);
  {
    NoGradGuard no_grad;
    layer.weight.copy_(fx(name + ".w"));
    if (layer.bias.defined()) layer.bias.copy_(fx(name + ".b"));
  }
  check_case(name, [&](Inputs in) { return layer(in.at("x")); }, {"x"});
  check_close(layer.weight.grad(), fx(name + ".grad_w"), name + ": weight gradient");
  if (layer.bias.defined()) check_close(layer.bias.grad(), fx(name + ".grad_b"), name + ": bias gradient");
}

}  // namespace

TEST_CASE("pad in every mode equals PyTorch's F.pad, crops included") {
  check_case("pad_constant", [](Inputs in) { return pad(in.at("x"), {1, 2, 0, 3}, {.value = 0.5}); });
  check_case("pad_constant_crop", [](Inputs in) { return nn::F::pad(in.at("x"), {-1, 2, 1, -2}); });
  check_case("pad_constant_3dims", [](Inputs in) { return pad(in.at("x"), {1, 0, 0, 2, 1, 1}, {.value = -1.0}); });
  for (auto [mode, name] : {std::pair{PadMode::Reflect, "reflect"}, std::pair{PadMode::Replicate, "replicate"},
                            std::pair{PadMode::Circular, "circular"}}) {
    const std::string m = name;
    check_case("pad_" + m + "_1d", [&](Inputs in) { return pad(in.at("x"), {2, 3}, {.mode = mode}); });
    check_case("pad_" + m + "_2d", [&](Inputs in) { return pad(in.at("x"), {1, 2, 3, 0}, {.mode = mode}); });
    if (mode == PadMode::Circular) continue;
    check_case("pad_" + m + "_1d_unbatched", [&](Inputs in) { return pad(in.at("x"), {3, 1}, {.mode = mode}); });
    check_case("pad_" + m + "_2d_unbatched_t", [&](Inputs in) { return pad(in.at("x"), {2, 2, 1, 3}, {.mode = mode}); });
  }
  check_case("pad_circular_whole", [](Inputs in) { return pad(in.at("x"), {4, 4, 0, 3}, {.mode = PadMode::Circular}); });
}

TEST_CASE("pad refuses what PyTorch refuses, with the reason") {
  const Tensor x = zeros({2, 3, 4, 5});
  CHECK_THROWS_WITH(pad(x, {1, 2, 3}), doctest::Contains("pairs"));
  CHECK_THROWS_WITH(pad(x, {5, 0, 0, 0}, {.mode = PadMode::Reflect}), doctest::Contains("must be less than"));
  CHECK_THROWS_WITH(pad(x, {6, 0, 0, 0}, {.mode = PadMode::Circular}), doctest::Contains("at most"));
  CHECK_THROWS_WITH(pad(x, {1, 1}, {.mode = PadMode::Replicate}), doctest::Contains("2-D or 3-D input"));
  CHECK_THROWS_WITH(pad(x, {-1, 0, 0, 0}, {.mode = PadMode::Reflect}), doctest::Contains("non-negative"));
  CHECK_THROWS_WITH(pad(x, {-3, -3}), doctest::Contains("crop more"));
}

TEST_CASE("conv2d and pooling take unbatched (C, H, W) inputs as PyTorch does") {
  check_case("conv2d_unbatched", [](Inputs in) { return conv2d(in.at("x"), in.at("w"), in.at("b"), {.stride = 2, .padding = 1}); });
  check_case("max_pool2d_unbatched", [](Inputs in) { return nn::MaxPool2d({.kernel_size = 3, .stride = 2, .padding = 1})(in.at("x")); });
  check_case("avg_pool2d_unbatched", [](Inputs in) { return nn::AvgPool2d(2)(in.at("x")); });
  check_case("adaptive_avg_pool2d_unbatched", [](Inputs in) { return nn::AdaptiveAvgPool2d({3, 2})(in.at("x")); });
  const auto [y, indices] = max_pool2d_with_indices(zeros({3, 4, 4}), {.kernel_size = 2});
  CHECK(y.sizes() == Shape{3, 2, 2});
  CHECK(indices.sizes() == Shape{3, 2, 2});
}

TEST_CASE("Conv2d's padding modes, padding=same and valid equal PyTorch's") {
  const std::pair<nn::PaddingMode, std::string> modes[] = {{nn::PaddingMode::Zeros, "zeros"},
                                                           {nn::PaddingMode::Reflect, "reflect"},
                                                           {nn::PaddingMode::Replicate, "replicate"},
                                                           {nn::PaddingMode::Circular, "circular"}};
  for (const auto& [mode, name] : modes) {
    nn::Conv2d plain(3, 4, {3, 2}, {.stride = {2, 1}, .padding = {1, 2}, .padding_mode = mode});
    check_layer("conv2d_" + name, plain);
    nn::Conv2d same(2, 4, {4, 3}, {.padding = nn::kSame, .dilation = {1, 2}, .padding_mode = mode});
    CHECK(same(zeros({1, 2, 6, 7})).sizes() == Shape{1, 4, 6, 7});
    check_layer("conv2d_" + name + "_same", same);
    if (mode == nn::PaddingMode::Circular) continue;
    nn::Conv2d unbatched(4, 2, 3, {.padding = 1, .groups = 2, .bias = false, .padding_mode = mode});
    check_layer("conv2d_" + name + "_unbatched_t", unbatched);
  }
  check_case("F_conv2d_same", [](Inputs in) {
    return nn::F::conv2d(in.at("x"), in.at("w"), {}, {.padding = nn::kSame, .dilation = 2});
  });
  check_case("F_conv2d_valid", [](Inputs in) {
    return nn::F::conv2d(in.at("x"), in.at("w"), in.at("b"), {.padding = nn::kValid});
  });
  CHECK_THROWS_WITH(nn::Conv2d(2, 2, 3, {.stride = 2, .padding = nn::kSame}), doctest::Contains("stride 1"));
  CHECK(nn::Conv2d(2, 2, 3, {.padding = nn::kSame, .padding_mode = nn::PaddingMode::Reflect}).extra_repr() ==
        "2, 2, kernel_size=3x3, stride=1x1, padding=same, padding_mode=reflect");
}

TEST_CASE("pooling with ceil_mode equals PyTorch's, a last window in the right padding dropped") {
  // 6x8 by 3, stride 2, padding 1: 4x5 windows where floor mode has 3x4. 5x7 by 2, stride 2, padding 1:
  // the fifth column's window would start in the right padding, and is dropped.
  const Pool2dOptions ceil3{.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true};
  const Pool2dOptions ceil2{.kernel_size = 2, .stride = 2, .padding = 1, .ceil_mode = true};
  check_case("max_pool2d_ceil", [&](Inputs in) { return max_pool2d(in.at("x"), ceil3); });
  check_case("max_pool2d_ceil_dropped", [&](Inputs in) { return max_pool2d(in.at("x"), ceil2); });
  check_case("max_pool2d_ceil_plain_t", [](Inputs in) {
    return nn::MaxPool2d({.kernel_size = {2, 3}, .stride = 2, .ceil_mode = true})(in.at("x"));
  });
  for (bool include : {true, false}) {
    const std::string tag = include ? "include" : "exclude";
    Pool2dOptions with3 = ceil3, with2 = ceil2;
    with3.count_include_pad = with2.count_include_pad = include;
    check_case("avg_pool2d_ceil_" + tag, [&](Inputs in) { return avg_pool2d(in.at("x"), with3); });
    check_case("avg_pool2d_ceil_dropped_" + tag, [&](Inputs in) { return avg_pool2d(in.at("x"), with2); });
    check_case("avg_pool2d_pad_" + tag + "_t", [&](Inputs in) {
      return avg_pool2d(in.at("x"), {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = 1, .count_include_pad = include});
    });
  }
  check_case("avg_pool2d_ceil_plain", [](Inputs in) {
    return nn::AvgPool2d({.kernel_size = 3, .stride = 2, .ceil_mode = true})(in.at("x"));
  });
}

TEST_CASE("adaptive max pooling equals PyTorch's in values, indices and gradient") {
  const std::pair<std::string, Size2> cases[] = {{"adaptive_max_3x4", {3, 4}}, {"adaptive_max_global", 1},
                                                 {"adaptive_max_up", {6, 7}}, {"adaptive_max_unbatched_t", {4, 3}}};
  for (const auto& [name, size] : cases) {
    check_case(name, [&](Inputs in) { return nn::AdaptiveMaxPool2d(size)(in.at("x")); });
    const Tensor x = fx(name + ".x");
    const auto [y, indices] = adaptive_max_pool2d_with_indices(name.ends_with("_t") ? x.transpose(-1, -2) : x, size);
    CHECK(indices.to_vector<int64_t>() == fx(name + ".indices").to_vector<int64_t>());
  }
}

TEST_CASE("conv1d and Conv1d (padding modes, same) equal PyTorch's") {
  check_case("conv1d", [](Inputs in) {
    return conv1d(in.at("x"), in.at("w"), in.at("b"), {.stride = 2, .padding = 1, .dilation = 2, .groups = 2});
  });
  check_case("conv1d_unbatched", [](Inputs in) { return conv1d(in.at("x"), in.at("w")); });
  check_case("conv1d_same", [](Inputs in) { return nn::F::conv1d(in.at("x"), in.at("w"), in.at("b"), {.padding = nn::kSame}); });
  for (const auto& [mode, name] : {std::pair{nn::PaddingMode::Zeros, "zeros"}, std::pair{nn::PaddingMode::Reflect, "reflect"},
                                   std::pair{nn::PaddingMode::Circular, "circular"}}) {
    nn::Conv1d same(3, 2, 4, {.padding = nn::kSame, .dilation = 2, .padding_mode = mode});
    check_layer(std::string("Conv1d_") + name + "_same", same);
  }
  nn::Conv1d replicate(3, 5, 3, {.stride = 3, .padding = 2, .padding_mode = nn::PaddingMode::Replicate});
  check_layer("Conv1d_replicate_t", replicate);
}

TEST_CASE("interpolate and Upsample (nearest, bilinear with and without align_corners) equal PyTorch's") {
  using enum InterpolateMode;
  check_case("nearest_size", [](Inputs in) { return interpolate(in.at("x"), {.size = {7, 5}}); });
  check_case("nearest_scale2", [](Inputs in) { return interpolate(in.at("x"), {.scale_factor = 2}); });
  check_case("nearest_scale_1_7", [](Inputs in) { return interpolate(in.at("x"), {.scale_factor = {1.7, 0.6}}); });
  for (bool ac : {false, true}) {
    const std::string tag = ac ? "ac" : "noac";
    check_case("bilinear_size_" + tag, [&](Inputs in) {
      return interpolate(in.at("x"), {.size = {7, 9}, .mode = Bilinear, .align_corners = ac});
    });
    check_case("bilinear_down_" + tag + "_t", [&](Inputs in) {
      return interpolate(in.at("x"), {.size = {3, 2}, .mode = Bilinear, .align_corners = ac});
    });
    nn::Upsample up({.scale_factor = {2.5, 1.5}, .mode = Bilinear, .align_corners = ac});
    check_case("bilinear_scale_" + tag, [&](Inputs in) { return up(in.at("x")); });
  }
  CHECK(nn::Upsample({.scale_factor = 2}).extra_repr() == "scale_factor=(2, 2), mode=nearest");
  CHECK(nn::Upsample({.size = {3, 4}, .mode = Bilinear, .align_corners = true}).extra_repr() ==
        "size=3x4, mode=bilinear, align_corners=true");
  CHECK_THROWS_WITH(interpolate(zeros({1, 1, 2, 2}), {}), doctest::Contains("exactly one of size and scale_factor"));
  CHECK_THROWS_WITH(interpolate(zeros({1, 1, 2, 2}), {.size = 3, .align_corners = true}), doctest::Contains("bilinear"));
}

TEST_CASE("conv_transpose2d and ConvTranspose2d equal PyTorch's") {
  check_case("conv_transpose2d", [](Inputs in) {
    return conv_transpose2d(in.at("x"), in.at("w"), in.at("b"), {.stride = 2, .padding = 1, .output_padding = 1});
  });
  check_case("conv_transpose2d_groups", [](Inputs in) {
    return conv_transpose2d(in.at("x"), in.at("w"), {},
                            {.stride = {2, 3}, .padding = {0, 2}, .output_padding = {1, 2}, .groups = 2, .dilation = {2, 1}});
  });
  check_case("conv_transpose2d_unbatched_t", [](Inputs in) { return conv_transpose2d(in.at("x"), in.at("w"), in.at("b")); });
  nn::ConvTranspose2d layer(16, 16, 3, {.padding = 1});  // 3x3 stride 1, 16 channels: Winograd's gradient path
  check_layer("ConvTranspose2d_winograd", layer);
  CHECK_THROWS_WITH(conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), {}, {.stride = 2, .output_padding = 2}),
                    doctest::Contains("less than the stride"));
  CHECK_THROWS_WITH(conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), zeros({2}, {.dtype = kFloat64})),
                    doctest::Contains("of the input's dtype float32"));
}
