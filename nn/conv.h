// Conv2d: the 2-D convolution layer, initialised like PyTorch's nn.Conv2d.
//   x: (N, in_channels, H, W)  weight: (out_channels, in_channels/groups, kh, kw)  bias: (out_channels)
//   y: (N, out_channels, OH, OW),  OH = (H + 2·padding - dilation·(kh - 1) - 1) / stride + 1 (OW alike)
// forward is mt::conv2d: im2col + one GEMM per group, with the bias written first and the GEMM
// accumulating onto it (tensor/raw_conv.cpp).
//
//   auto conv = std::make_shared<nn::Conv2d>(3, 16, 3, nn::Conv2dLayerOptions{.padding = 1});
//
// What it does not do: padding modes other than zeros, "same"/"valid" padding strings, 3-D
// (unbatched) inputs, Conv1d/Conv3d, transposed convolution.
#pragma once

#include "nn/module.h"
#include "tensor/window.h"

namespace mt::nn {

struct Conv2dLayerOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;  // false: no "bias" parameter
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

}  // namespace mt::nn
