// LayerNorm over the trailing dims, like torch.nn.LayerNorm(normalized_shape): per sample, the
// mean and the (biased) variance are taken over the last normalized_shape.size() dims together,
//   y = (x - mean)/√(var + eps)·weight + bias
//   x: (..., *normalized_shape)  weight, bias: normalized_shape (elementwise_affine), or none
// Those trailing dims are one row of n = Π normalized_shape values, so each forward is one fused op
// over the last dim (mt::layer_norm, autograd/ops.h) on a (..., n) reshape of x; F::layer_norm
// is the same without a module. mt::reference::layer_norm is the composition the fused op replaces.
#pragma once

#include "nn/module.h"

namespace mt::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight (ones) and bias (zeros) of normalized_shape
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  explicit LayerNorm(int64_t normalized_size, LayerNormOptions options = {})
      : LayerNorm(Shape{normalized_size}, options) {}

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Shape normalized_shape;
  const LayerNormOptions options;
  Tensor weight;  // normalized_shape, ones; undefined without elementwise_affine
  Tensor bias;    // normalized_shape, zeros; undefined without elementwise_affine
};

}  // namespace mt::nn

namespace mt::nn::functional {

// As F.layer_norm(x, normalized_shape, weight, bias, eps): x's last dims must be normalized_shape;
// weight and bias are of normalized_shape, or undefined for no scale (1) or no shift (0).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace mt::nn::functional
