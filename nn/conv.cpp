// Conv2d: parameters, PyTorch's initialisation, the input checks and the forward.
#include "nn/conv.h"

#include <cmath>
#include <sstream>

#include "autograd/ops.h"
#include "nn/init.h"

namespace mt::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dLayerOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  MT_CHECK(in_channels > 0 && out_channels > 0, "Conv2d: in_channels (", in_channels, ") and out_channels (",
           out_channels, ") must be positive");
  MT_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "Conv2d: kernel_size must be positive, got ", kernel_size);
  MT_CHECK(options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
           "Conv2d: groups = ", options.groups, " must divide in_channels (", in_channels, ") and out_channels (",
           out_channels, ")");
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

// kaiming_uniform_(a = √5): gain = √(2 / (1 + 5)) = √(1/3), bound = gain·√(3 / fan_in) = 1/√fan_in, the
// same bound PyTorch then uses for the bias (its reset_parameters computes it from fan_in).
void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fans(weight).fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 4 && x.size(1) == in_channels, "Conv2d(", extra_repr(), "): expected input of shape (N, ",
           in_channels, ", H, W), got ", x.sizes());
  return mt::conv2d(x, weight, bias,
                    {.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
                     .groups = options.groups});
}

std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << kernel_size << ", stride=" << options.stride;
  if (options.padding != Size2(0)) os << ", padding=" << options.padding;
  if (options.dilation != Size2(1)) os << ", dilation=" << options.dilation;
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=false";
  return os.str();
}

}  // namespace mt::nn
