// The reference compositions of autograd/detail/reference_ops.h: differentiable through the ops they use,
// so their gradients come from those ops' backwards, independently of the fused kernels.
#include "autograd/detail/reference_ops.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "tensor/raw_ops.h"

namespace mt::reference {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor centred = x - mean(x, {-1}, true);
  const Tensor var = mean(centred * centred, {-1}, true);
  return centred / sqrt(var + eps) * weight + bias;
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  if (approximate == GeluApproximate::None) return x * (erf(x * (1.0 / std::numbers::sqrt2)) * 0.5 + 0.5);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return x * (tanh((x + pow(x, 3.0) * 0.044715) * k) * 0.5 + 0.5);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  const double scale = raw::attention_params(q, options).scale;
  Tensor scores = matmul(q, transpose(k, -1, -2)) * scale;  // (B, H, Tq, Tk)
  if (options.causal) {
    const Tensor future = raw::binary(BinaryOp::Eq, raw::tril_mask(q.size(-2), k.size(-2), 0, q.device()),
                                      zeros(Shape{}, {.dtype = kInt64, .device = q.device()}));
    scores = masked_fill(scores, future, -std::numeric_limits<double>::infinity());
  }
  return matmul(softmax(scores, -1), v);
}

}  // namespace mt::reference
