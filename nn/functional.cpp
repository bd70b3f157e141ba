// nn::functional: the activations and dropout, composed from differentiable ops (autograd/ops.h);
// the losses are in nn/loss.cpp. Masks use raw ops (tensor/raw_ops.h): they need no gradient.
#include "nn/functional.h"

#include "tensor/raw_ops.h"

namespace mt::nn::functional {

// ---- activations ----------------------------------------------------------------------------------

// One fused node (autograd/functions/transformer.cpp); the composition is mt::reference::gelu.
Tensor gelu(const Tensor& x, GeluApproximate approximate) { return mt::gelu(x, approximate); }

// Note [Guarded branches]: an activation written as where(cond, f(x), g(x)) computes both branches
// everywhere. Where the branch not taken overflows (exp(x) for large x), where's backward sends it a
// zero gradient, and the chain rule through exp multiplies that 0 by exp(x) = inf: NaN. So the
// argument of such a branch is first clamped into the region where the branch is taken; clamp passes
// no gradient outside its bounds (Note [Masked gradients] in autograd/functions/elementwise.cpp), and
// inside them it is the identity, so the taken branch is unchanged.

namespace {
// v as a 0-dim tensor of like's dtype and device, to compare against (it broadcasts).
Tensor number(double v, const Tensor& like) { return scalar_tensor(v, {.dtype = like.dtype(), .device = like.device()}); }
}  // namespace

// y = x·σ(x)   =>   dx = dy·(σ(x) + x·σ(x)·(1 - σ(x))), by the product rule through mul and sigmoid.
Tensor silu(const Tensor& x) { return x * mt::sigmoid(x); }

// y = x > 0 ? x : slope·x   =>   dx = dy or slope·dy (slope at 0 too, as PyTorch).
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return mt::where(mt::gt(x, number(0.0, x)), x, x * negative_slope);
}

// y = x > 0 ? x : α·(eˣ - 1)   =>   dx = dy or dy·α·eˣ. The exp branch sees min(x, 0) (Note [Guarded branches]).
Tensor elu(const Tensor& x, double alpha) {
  return mt::where(mt::gt(x, number(0.0, x)), x, mt::expm1(mt::clamp(x, std::nullopt, 0.0)) * alpha);
}

// y = β·x > threshold ? x : log(1 + e^(β·x))/β   =>   dx = dy or dy·σ(β·x). The log branch sees
// min(β·x, threshold) (Note [Guarded branches]).
Tensor softplus(const Tensor& x, double beta, double threshold) {
  const Tensor bx = x * beta;
  const Tensor smooth = mt::log1p(mt::exp(mt::clamp(bx, std::nullopt, threshold))) * (1.0 / beta);
  return mt::where(mt::gt(bx, number(threshold, bx)), x, smooth);
}

// y = x·tanh(softplus(x)) = x·n/(n + 2) with n = eˣ(eˣ + 2), since tanh(log(1 + e)) = ((1+e)² - 1)/((1+e)² + 1).
// One exp and arithmetic instead of exp, log1p and tanh: each of those was a libm call per element, and
// the float32 exp is vectorised (Note [Vectorised float exp]), which brought bench/nn_ops.sh's mish from
// 2.4x libtorch's time to within it. No cancellation: n/(n + 2) ≈ eˣ for x → -∞ and 1 - 2/n for large x.
// Past 20, y = x: PyTorch's kernel has no threshold, but tanh of anything past 19.1 rounds to 1 in
// float64, and the exp branch sees min(x, 20) (Note [Guarded branches]), so n cannot overflow.
Tensor mish(const Tensor& x) {
  const Tensor e = mt::exp(mt::clamp(x, std::nullopt, 20.0));
  const Tensor n = e * (e + 2.0);
  return mt::where(mt::gt(x, number(20.0, x)), x, x * n / (n + 2.0));
}

// y = x·clamp(x + 3, 0, 6)/6   =>   dx = 0 below -3, (2x + 3)/6 between, 1 above 3 (clamp's
// gradient is 1 on its bounds, so at ±3 the middle formula applies: PyTorch's choice too).
Tensor hardswish(const Tensor& x) { return x * mt::clamp(x + 3.0, 0.0, 6.0) * (1.0 / 6.0); }

Tensor dropout(const Tensor& x, DropoutFuncOptions o) {
  MT_CHECK(o.p >= 0.0 && o.p <= 1.0, "dropout: p must be in [0, 1], got ", o.p);
  if (!o.training || o.p == 0.0) return x;
  MT_CHECK(is_floating(x.dtype()), "dropout: needs a floating-point input, got ", x.dtype());
  if (o.p == 1.0) return x * 0.0;  // everything dropped; the scale 1/(1-p) would be infinite
  Generator& gen = o.generator ? *o.generator : default_generator();
  // mask = [u >= p]·1/(1-p) with u ~ U[0, 1): an element survives with probability 1 - p.
  // For 16-bit x, u and the test are float32 (the same draws drop the same elements as in float32);
  // x·[u >= p] is exact, then the product with 1/(1-p) (rounded to x's dtype, as a number next to a
  // tensor is, and as PyTorch's dropout does) rounds once.
  const TensorOptions draws{.dtype = is_low_precision(x.dtype()) ? kFloat32 : x.dtype(), .device = x.device()};
  const Tensor u = rand(x.sizes(), gen, draws);
  const Tensor keep = raw::binary(BinaryOp::Ge, u, scalar_tensor(o.p, draws));
  if (is_low_precision(x.dtype())) return (x * raw::cast(keep, x.dtype())) * (1.0 / (1.0 - o.p));
  return x * raw::unary(UnaryOp::MulScalar, keep, 1.0 / (1.0 - o.p));
}

}  // namespace mt::nn::functional
