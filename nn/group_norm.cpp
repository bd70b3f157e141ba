// GroupNorm and InstanceNorm2d over mt::group_norm (autograd/functions/group_norm.cpp), and
// InstanceNorm's running statistics.
#include "nn/group_norm.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/batchnorm.h"

namespace mt::nn {

namespace functional {

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  return mt::group_norm(x, num_groups, weight, bias, eps);
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, InstanceNormFuncOptions o) {
  MT_CHECK(x.dim() >= 3, "instance_norm: input must be (N, C, d1, ...), got shape ", x.sizes());
  const int64_t c = x.size(1), plane = x.numel() / std::max<int64_t>(x.size(0) * c, 1);
  MT_CHECK(running_mean.defined() == running_var.defined(),
           "instance_norm: running_mean and running_var must be given together");
  if (!o.use_input_stats) {
    MT_CHECK(running_mean.defined(), "instance_norm: without input statistics it needs running_mean and running_var");
    return batch_norm(x, running_mean, running_var, weight, bias, {.training = false, .eps = o.eps});
  }
  if (running_mean.defined()) {
    MT_CHECK(plane > 1, "instance_norm: updating the running variance needs more than one value per plane, got ",
             x.sizes());
    NoGradGuard no_grad;
    std::vector<int64_t> dims;
    for (int d = 2; d < x.dim(); ++d) dims.push_back(d);
    Tensor rm = running_mean, rv = running_var;  // handles sharing the buffers' storage
    rm.mul_(1.0 - o.momentum).add_(mean(mean(x, dims), {0}), o.momentum);
    rv.mul_(1.0 - o.momentum).add_(mean(var(x, dims, {.unbiased = true}), {0}), o.momentum);
  }
  return mt::group_norm(x, c, weight, bias, o.eps);
}

}  // namespace functional

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
    : num_groups(num_groups), num_channels(num_channels), options(options) {
  MT_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, "GroupNorm: num_groups (",
           num_groups, ") must be positive and divide num_channels (", num_channels, ")");
  MT_CHECK(options.eps >= 0, "GroupNorm: eps must be non-negative, got ", options.eps);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  MT_CHECK(x.dim() >= 2 && x.size(1) == num_channels, "GroupNorm(", extra_repr(), "): expected input of shape (N, ",
           num_channels, ", ...), got ", x.sizes());
  return functional::group_norm(x, num_groups, weight, bias, options.eps);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << num_groups << ", " << num_channels << ", eps=" << options.eps
     << ", affine=" << (options.affine ? "true" : "false");
  return os.str();
}

InstanceNorm2d::InstanceNorm2d(int64_t num_features, InstanceNormOptions options)
    : num_features(num_features), options(options) {
  MT_CHECK(num_features > 0, "InstanceNorm2d: num_features must be positive, got ", num_features);
  MT_CHECK(options.momentum >= 0.0 && options.momentum <= 1.0, "InstanceNorm2d: momentum must be in [0, 1], got ",
           options.momentum);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros(Shape{}, {.dtype = kInt64}));
  }
}

Tensor InstanceNorm2d::forward(const Tensor& x) {
  MT_CHECK((x.dim() == 4 && x.size(1) == num_features) || (x.dim() == 3 && x.size(0) == num_features),
           "InstanceNorm2d(", extra_repr(), "): expected input of shape (N, ", num_features, ", H, W) or (",
           num_features, ", H, W), got ", x.sizes());
  if (x.dim() == 3) return squeeze(forward(unsqueeze(x, 0)), 0);  // unbatched: a batch of one
  // PyTorch's rule: input statistics while training, or always when nothing is tracked.
  const bool input_stats = is_training() || !options.track_running_stats;
  const bool update = is_training() && options.track_running_stats;
  return functional::instance_norm(x, update || !input_stats ? running_mean : Tensor(),
                                   update || !input_stats ? running_var : Tensor(), weight, bias,
                                   {.use_input_stats = input_stats, .momentum = options.momentum, .eps = options.eps});
}

std::string InstanceNorm2d::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << options.eps << ", momentum=" << options.momentum
     << ", affine=" << (options.affine ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats ? "true" : "false");
  return os.str();
}

}  // namespace mt::nn
