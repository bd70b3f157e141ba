// Pooling layers over the last two dims of (N, C, H, W) or (C, H, W): MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d, AdaptiveMaxPool2d, as PyTorch's. Each is its functional op (autograd/ops.h,
// autograd/spatial_ops.h) plus a check that names the layer.
//   MaxPool2d          max over each window; stride defaults to the kernel size; padding is -inf.
//   AvgPool2d          mean over each window; count_include_pad (default) divides by the whole window.
//   ceil_mode          (both) output sizes round up; a last window must start inside the input or its
//                      left padding (Note [Pooling ceil_mode] in tensor/backend.h).
//   AdaptiveAvgPool2d  the output size is fixed and the windows adapt: cell i of n covers
//   AdaptiveMaxPool2d  [floor(i·H/n), ceil((i+1)·H/n)). Output 1 is global average (max) pooling.
// What they do not do: divisor_override, return_indices on the modules
// (mt::max_pool2d_with_indices and mt::adaptive_max_pool2d_with_indices give them).
#pragma once

#include <sstream>
#include <string>

#include "autograd/ops.h"
#include "autograd/spatial_ops.h"
#include "nn/module.h"

namespace mt::nn {

namespace detail {
inline void check_pool_input(const Tensor& x, const Module& m) {
  MT_CHECK(x.dim() == 4 || x.dim() == 3, m.name(), "(", m.extra_repr(), "): expected input of shape (N, C, H, W) or ",
           "(C, H, W), got ", x.sizes());
}
inline std::string pool_repr(const Pool2dOptions& o) {
  std::ostringstream os;
  const Size2 stride{o.stride.h == 0 ? o.kernel_size.h : o.stride.h, o.stride.w == 0 ? o.kernel_size.w : o.stride.w};
  os << "kernel_size=" << o.kernel_size << ", stride=" << stride << ", padding=" << o.padding;
  if (o.ceil_mode) os << ", ceil_mode=true";
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

class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Size2 output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override {
    detail::check_pool_input(x, *this);
    return mt::adaptive_max_pool2d(x, output_size);
  }
  std::string extra_repr() const override {
    std::ostringstream os;
    os << "output_size=" << output_size;
    return os.str();
  }
  const Size2 output_size;
};

}  // namespace mt::nn
