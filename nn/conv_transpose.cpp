// ConvTranspose2d: parameters, PyTorch's initialisation, the input check and the forward.
#include "nn/conv_transpose.h"

#include <sstream>

#include "nn/conv.h"

namespace mt::nn {

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 ConvTranspose2dLayerOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  detail::check_conv_channels("ConvTranspose2d", in_channels, out_channels, options.groups);
  MT_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "ConvTranspose2d: kernel_size must be positive, got ", kernel_size);
  weight = register_parameter("weight",
                              empty({in_channels, out_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() { detail::reset_conv_parameters(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& x) {
  MT_CHECK((x.dim() == 4 || x.dim() == 3) && x.size(x.dim() - 3) == in_channels, "ConvTranspose2d(", extra_repr(),
           "): expected input of shape (N, ", in_channels, ", H, W) or (", in_channels, ", H, W), got ", x.sizes());
  return mt::conv_transpose2d(x, weight, bias,
                              {.stride = options.stride, .padding = options.padding,
                               .output_padding = options.output_padding, .groups = options.groups,
                               .dilation = options.dilation});
}

std::string ConvTranspose2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << kernel_size << ", stride=" << options.stride;
  if (options.padding != Size2(0)) os << ", padding=" << options.padding;
  if (options.output_padding != Size2(0)) os << ", output_padding=" << options.output_padding;
  if (options.dilation != Size2(1)) os << ", dilation=" << options.dilation;
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=false";
  return os.str();
}

}  // namespace mt::nn
