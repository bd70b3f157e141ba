// LayerNorm: weight 1 and bias 0 (the identity affine map), and the fused forward.
#include "nn/layer_norm.h"

#include <sstream>

#include "autograd/ops.h"

namespace mt::nn {

LayerNorm::LayerNorm(int64_t normalized_size, LayerNormOptions options)
    : normalized_size(normalized_size), options(options) {
  MT_CHECK(normalized_size > 0, "LayerNorm: normalized_size must be positive, got ", normalized_size);
  MT_CHECK(options.eps >= 0, "LayerNorm: eps must be non-negative, got ", options.eps);
  weight = register_parameter("weight", ones({normalized_size}));
  bias = register_parameter("bias", zeros({normalized_size}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= 1 && x.size(-1) == normalized_size, "LayerNorm(", normalized_size, "): input of shape ",
           x.sizes(), " must have ", normalized_size, " features in its last dim");
  return mt::layer_norm(x, weight, bias, options.eps);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << "(" << normalized_size << "), eps=" << options.eps;
  return os.str();
}

}  // namespace mt::nn
