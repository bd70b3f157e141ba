// Pooling layers over the last two dims of (N, C, H, W): MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,
// as PyTorch's. Each is its functional op (autograd/ops.h) plus a check that names the layer.
//   MaxPool2d          max over each window; stride defaults to the kernel size; padding is -inf.
//   AvgPool2d          mean over each window; count_include_pad (default) divides by the whole window.
//   AdaptiveAvgPool2d  the output size is fixed and the windows adapt: cell i of n covers
//                      [floor(i·H/n), ceil((i+1)·H/n)). Output 1 is global average pooling.
// What they do not do: ceil_mode, divisor_override, 3-D (unbatched) inputs, return_indices on the
// module (mt::max_pool2d_with_indices gives them).
#pragma once

#include <sstream>
#include <string>

#include "autograd/ops.h"
#include "nn/module.h"

namespace mt::nn {

namespace detail {
inline void check_pool_input(const Tensor& x, const Module& m) {
  MT_CHECK(x.dim() == 4, m.name(), "(", m.extra_repr(), "): expected input of shape (N, C, H, W), got ", x.sizes());
}
inline std::string pool_repr(const Pool2dOptions& o) {
  std::ostringstream os;
  const Size2 stride{o.stride.h == 0 ? o.kernel_size.h : o.stride.h, o.stride.w == 0 ? o.kernel_size.w : o.stride.w};
  os << "kernel_size=" << o.kernel_size << ", stride=" << stride << ", padding=" << o.padding;
  return os.str();
}
}  // namespace detail

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options(options) {}
  explicit MaxPool2d(Size2 kernel_size) : options{.kernel_size = kernel_size} {}
  Tensor forward(const Tensor& x) override {
    detail::check_pool_input(x, *this);
    return mt::max_pool2d(x, options);
  }
  std::string extra_repr() const override {
    std::ostringstream os;
    os << detail::pool_repr(options) << ", dilation=" << options.dilation;
    return os.str();
  }
  const Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options(options) {}
  explicit AvgPool2d(Size2 kernel_size) : options{.kernel_size = kernel_size} {}
  Tensor forward(const Tensor& x) override {
    detail::check_pool_input(x, *this);
    return mt::avg_pool2d(x, options);
  }
  std::string extra_repr() const override { return detail::pool_repr(options); }
  const Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override {
    detail::check_pool_input(x, *this);
    return mt::adaptive_avg_pool2d(x, output_size);
  }
  std::string extra_repr() const override {
    std::ostringstream os;
    os << "output_size=" << output_size;
    return os.str();
  }
  const Size2 output_size;
};

}  // namespace mt::nn
