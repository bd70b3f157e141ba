// Upsample, the layer form of mt::interpolate (autograd/spatial_ops.h), as PyTorch's nn.Upsample:
// nearest or bilinear resampling of (N, C, H, W) to a size or by a scale factor. No parameters.
//
//   auto up = std::make_shared<nn::Upsample>(
//       InterpolateOptions{.scale_factor = 2, .mode = InterpolateMode::Bilinear});
#pragma once

#include <sstream>
#include <string>

#include "autograd/spatial_ops.h"
#include "nn/module.h"

namespace mt::nn {

class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options) : options(options) {}
  Tensor forward(const Tensor& x) override { return mt::interpolate(x, options); }
  std::string extra_repr() const override {
    std::ostringstream os;
    if (options.size.h > 0 || options.size.w > 0) os << "size=" << options.size;
    else
      os << "scale_factor=(" << repr_number(options.scale_factor.h) << ", " << repr_number(options.scale_factor.w) << ")";
    os << ", mode=" << (options.mode == InterpolateMode::Nearest ? "nearest" : "bilinear");
    if (options.align_corners) os << ", align_corners=true";
    return os.str();
  }
  const InterpolateOptions options;
};

}  // namespace mt::nn
