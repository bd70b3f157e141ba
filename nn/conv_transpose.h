// ConvTranspose2d, the transposed convolution layer (the adjoint of Conv2d's map from input to
// output; "deconvolution"), initialised like PyTorch's nn.ConvTranspose2d.
//   x: (N, in_channels, H, W) or (in_channels, H, W)  weight: (in_channels, out_channels/groups, kh, kw)
//   y: (N, out_channels, OH, OW),  OH = (H - 1)·stride - 2·padding + dilation·(kh - 1) + output_padding + 1
// forward is mt::conv_transpose2d (Note [Transposed convolution is conv2d's input gradient]).
//
//   auto up = std::make_shared<nn::ConvTranspose2d>(16, 8, 4,
//                                                   nn::ConvTranspose2dLayerOptions{.stride = 2, .padding = 1});
//
// What it does not do: forward with an output_size (pick output_padding instead); output_padding
// >= stride; padding modes other than zeros (PyTorch has none either).
#pragma once

#include "autograd/spatial_ops.h"
#include "nn/module.h"

namespace mt::nn {

struct ConvTranspose2dLayerOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
};

class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dLayerOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  // As Conv2d's, from this weight's fans: fan_in = out_channels/groups · kh · kw (PyTorch computes it
  // from the weight's dim 1 too).
  void reset_parameters();

  const int64_t in_channels, out_channels;
  const Size2 kernel_size;
  const ConvTranspose2dLayerOptions options;
  Tensor weight;  // (in_channels, out_channels/groups, kh, kw)
  Tensor bias;    // (out_channels), undefined without bias
};

}  // namespace mt::nn
