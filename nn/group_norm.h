// Per-sample normalisation over groups of channels, as PyTorch's GroupNorm and InstanceNorm2d.
//   GroupNorm(G, C):  x: (N, C, *) viewed as (N, G, C/G·Π*); each (n, g) row is normalised by its own
//                     mean and biased variance, then y = x̂·weight[c] + bias[c] per channel (affine).
//   InstanceNorm2d(C): x: (N, C, H, W) or (C, H, W); each (n, c) plane is normalised on its own: the
//                     group norm with G = C. PyTorch's defaults: no affine, no running statistics.
//                     With track_running_stats, training also updates
//                       running_mean ← (1 - m)·running_mean + m·mean_n(mean of plane (n, c))
//                       running_var  ← (1 - m)·running_var  + m·mean_n(unbiased var of plane (n, c))
//                     and eval normalises with them, as BatchNorm's eval does (PyTorch's rule).
// Both are mt::group_norm: one fused node on the CPU, on CUDA a layer norm over the rows of a
// reshape of x, then the per-channel affine map (Note [Group norm by a kernel]).
#pragma once

#include "nn/module.h"

namespace mt::nn {

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // learnable per-channel weight (ones) and bias (zeros)
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t num_groups, num_channels;
  const GroupNormOptions options;
  Tensor weight, bias;  // (C); undefined without affine
};

struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;
  bool track_running_stats = false;
};

class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNormOptions options = {});

  // (N, C, H, W) or (C, H, W) -> the same shape
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t num_features;
  const InstanceNormOptions options;
  Tensor weight, bias;                                    // (C); undefined without affine
  // (C), (C), () int64; undefined without tracking. num_batches_tracked is kept for PyTorch's state
  // dict and, as there, never counts: momentum is always a fixed factor here.
  Tensor running_mean, running_var, num_batches_tracked;
};

}  // namespace mt::nn

namespace mt::nn::functional {

// As F.group_norm(x, num_groups, weight, bias, eps). x: (N, C, *), C divisible by num_groups;
// weight, bias: (C) or undefined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

struct InstanceNormFuncOptions {
  bool use_input_stats = true;  // false: normalise with the running statistics (which must be given)
  double momentum = 0.1;
  double eps = 1e-5;
};
// As F.instance_norm. x: (N, C, *); running_mean, running_var, weight, bias: (C) or undefined. With
// use_input_stats and defined running statistics, those are updated in place as above.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                     InstanceNormFuncOptions options = {});

}  // namespace mt::nn::functional
