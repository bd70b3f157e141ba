// LayerNorm over the last dim, like torch.nn.LayerNorm(normalized_shape=n) with elementwise_affine:
//   y = (x - mean)/√(var + eps)·weight + bias,  mean and (biased) var over the last dim of each row
//   x: (..., n)  weight, bias: (n)  y: (..., n)
// forward is one fused op (mt::layer_norm, autograd/ops.h); mt::reference::layer_norm is the
// composition it replaces.
//
// Not here: normalising over several trailing dims, LayerNorm without weight or bias.
#pragma once

#include "nn/module.h"

namespace mt::nn {

struct LayerNormOptions {
  double eps = 1e-5;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_size, LayerNormOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t normalized_size;
  const LayerNormOptions options;
  Tensor weight;  // (n), ones
  Tensor bias;    // (n), zeros
};

}  // namespace mt::nn
