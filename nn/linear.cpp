// Linear: parameters, PyTorch's initialisation, and the fused forward.
#include "nn/linear.h"

#include <cmath>

#include "autograd/ops.h"
#include "nn/init.h"

namespace mt::nn {

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : in_features(in_features), out_features(out_features) {
  MT_CHECK(in_features > 0 && out_features > 0, "Linear: in_features (", in_features, ") and out_features (",
           out_features, ") must be positive");
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (options.bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

// PyTorch initialises the weight with kaiming_uniform_(a = √5): gain = √(2 / (1 + a²)) = √(1/3), so
// bound = gain·√(3 / fan_in) = 1/√in. The bias gets U(-1/√fan_in, 1/√fan_in) directly. Both reduce
// to the same bound, which is written out here rather than reached through the gain.
void Linear::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor Linear::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear(in_features=", in_features, ", out_features=",
           out_features, "): input of shape ", x.sizes(), " must have ", in_features, " features in its last dim");
  return mt::linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

}  // namespace mt::nn
