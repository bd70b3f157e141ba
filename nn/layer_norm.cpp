// LayerNorm: weight 1 and bias 0 (the identity affine map), and the fused forward over the
// trailing dims flattened into one.
#include "nn/layer_norm.h"

#include <sstream>

#include "autograd/ops.h"

namespace mt::nn {

namespace functional {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const int k = normalized_shape.size();
  MT_CHECK(k >= 1, "layer_norm: normalized_shape must have at least one dim");
  const bool ends_in = x.dim() >= k && Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape;
  MT_CHECK(ends_in, "layer_norm: input of shape ", x.sizes(), " must end in normalized_shape ", normalized_shape);
  for (const Tensor* t : {&weight, &bias}) {
    MT_CHECK(!t->defined() || t->sizes() == normalized_shape, "layer_norm: ", t == &weight ? "weight " : "bias ",
             t->sizes(), " must be of normalized_shape ", normalized_shape);
  }
  if (k == 1) return mt::layer_norm(x, weight, bias, eps);
  // (..., *normalized_shape) -> (..., n): one row per sample, normalised by the fused op.
  Shape rows(x.sizes().begin(), x.sizes().end() - k);
  rows.push_back(normalized_shape.numel());
  const auto flat = [&](const Tensor& t) { return t.defined() ? reshape(t, Shape{normalized_shape.numel()}) : t; };
  return reshape(mt::layer_norm(reshape(x, rows), flat(weight), flat(bias), eps), x.sizes());
}

}  // namespace functional

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions options)
    : normalized_shape(normalized_shape), options(options) {
  MT_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t s : normalized_shape)
    MT_CHECK(s > 0, "LayerNorm: normalized_shape ", normalized_shape, " must have positive sizes");
  MT_CHECK(options.eps >= 0, "LayerNorm: eps must be non-negative, got ", options.eps);
  if (options.elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int k = normalized_shape.size();
  MT_CHECK(x.dim() >= k && Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape, "LayerNorm(",
           extra_repr(), "): input of shape ", x.sizes(), " must end in ", normalized_shape);
  return functional::layer_norm(x, normalized_shape, weight, bias, options.eps);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << normalized_shape << ", eps=" << options.eps;
  if (!options.elementwise_affine) os << ", elementwise_affine=false";
  return os.str();
}

}  // namespace mt::nn
