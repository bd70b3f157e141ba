// Conv1d and Conv2d, the convolution layers, initialised like PyTorch's nn.Conv1d / nn.Conv2d, and
// their functional forms with PyTorch's padding="same" / "valid" (nn::F::conv1d, nn::F::conv2d).
//   x: (N, in_channels, H, W) or (in_channels, H, W)  weight: (out_channels, in_channels/groups, kh, kw)
//   y: (N, out_channels, OH, OW),  OH = (H + 2·padding - dilation·(kh - 1) - 1) / stride + 1 (OW alike)
// Conv1d is the same over (N, C, L) with a (out_channels, in_channels/groups, k) weight.
// forward is mt::conv2d: im2col + one GEMM per group, with the bias written first and the GEMM
// accumulating onto it (tensor/raw_conv.cpp). A padding_mode other than zeros pads with mt::pad first
// and convolves with no padding, as PyTorch does.
//
//   auto conv = std::make_shared<nn::Conv2d>(3, 16, 3, nn::Conv2dLayerOptions{.padding = 1});
//   auto same = std::make_shared<nn::Conv2d>(
//       16, 16, 4, nn::Conv2dLayerOptions{.padding = nn::kSame, .padding_mode = nn::PaddingMode::Reflect});
//
// What it does not do: Conv3d; ConvTranspose2d is in nn/conv_transpose.h.
#pragma once

#include "autograd/spatial_ops.h"
#include "nn/module.h"
#include "tensor/window.h"

namespace mt::nn {

// A convolution's padding: a size on each side, or "same" (output as large as the input; stride 1),
// or "valid" (none), as PyTorch's padding=int|tuple|'same'|'valid'. For Conv1d, one number.
struct ConvPadding {
  enum class Kind : uint8_t { Explicit, Same, Valid };
  Kind kind = Kind::Explicit;
  Size2 size = 0;
  constexpr ConvPadding() = default;
  constexpr ConvPadding(int64_t both) : size(both) {}  // NOLINT: implicit, so `.padding = 1` reads naturally
  constexpr ConvPadding(int64_t h, int64_t w) : size(h, w) {}
  constexpr ConvPadding(Size2 s) : size(s) {}     // NOLINT
  constexpr ConvPadding(Kind k) : kind(k) {}      // NOLINT: `.padding = nn::kSame`
};
inline constexpr ConvPadding::Kind kSame = ConvPadding::Kind::Same;
inline constexpr ConvPadding::Kind kValid = ConvPadding::Kind::Valid;

// PyTorch's padding_mode: 'zeros' | 'reflect' | 'replicate' | 'circular'.
enum class PaddingMode : uint8_t { Zeros, Reflect, Replicate, Circular };

struct Conv2dLayerOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;  // false: no "bias" parameter
  PaddingMode padding_mode = PaddingMode::Zeros;
};

struct Conv1dLayerOptions {
  int64_t stride = 1;
  ConvPadding padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  PaddingMode padding_mode = PaddingMode::Zeros;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dLayerOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  // Draws new initial values, weight first, from mt::default_generator(), as PyTorch does:
  // weight ~ kaiming_uniform_(a = √5), i.e. U(-1/√fan_in, 1/√fan_in), and bias ~ U(-1/√fan_in, 1/√fan_in),
  // fan_in = in_channels/groups · kh · kw.
  void reset_parameters();

  const int64_t in_channels, out_channels;
  const Size2 kernel_size;
  const Conv2dLayerOptions options;
  Tensor weight;  // (out_channels, in_channels/groups, kh, kw)
  Tensor bias;    // (out_channels), undefined without bias
};

class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dLayerOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();  // as Conv2d's, fan_in = in_channels/groups · k

  const int64_t in_channels, out_channels, kernel_size;
  const Conv1dLayerOptions options;
  Tensor weight;  // (out_channels, in_channels/groups, k)
  Tensor bias;    // (out_channels), undefined without bias
};

// The weight and bias shared by the convolution layers (nn/conv.cpp): checked, registered, initialised.
namespace detail {
void check_conv_channels(const char* layer, int64_t in_channels, int64_t out_channels, int64_t groups);
void reset_conv_parameters(const Tensor& weight, const Tensor& bias);
}  // namespace detail

}  // namespace mt::nn

namespace mt::nn::functional {

struct Conv2dFuncOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};
struct Conv1dFuncOptions {
  int64_t stride = 1;
  ConvPadding padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
// F.conv2d / F.conv1d: mt::conv2d / mt::conv1d, with "same" and "valid" padding. "same" pads
// dilation·(k - 1) in all, half on each side and the odd one on the right, as PyTorch does.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const Conv2dFuncOptions& options = {});
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const Conv1dFuncOptions& options = {});
using mt::conv_transpose2d;
using mt::interpolate;
using mt::pad;

}  // namespace mt::nn::functional
