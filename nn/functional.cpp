// nn::functional: the activations, dropout and the losses, composed from differentiable ops (autograd/ops.h).
// Masks and checks use raw ops (tensor/raw_ops.h): they need no gradient.
#include "nn/functional.h"

#include <cmath>
#include <numbers>

#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt::nn {

const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

}  // namespace mt::nn

namespace mt::nn::detail {

namespace {

// Mean (or sum) squared error as one node instead of three (sub, pow, mean): the seed job's loss is
// a third of its step, and most of that is per-op overhead, not arithmetic.
//   L = s·Σ (x − y)²  with s = 1/N (mean) or 1 (sum)   =>   dx = 2s·(x − y)·dL,  dy = −dx
struct MseLossBackward final : Node {
  SavedTensor diff;  // x − y, kept from the forward (in the promoted dtype)
  double scale = 1.0;
  mt::detail::InputInfo input_info, target_info;  // to cast each gradient back to its input's dtype
  TensorList apply(TensorList&& g) override {
    check_not_released();
    // (x − y)·dL, then ·2s in place: one new tensor. dL is 0-dim (a borrowed broadcast); when it is 1
    // (loss.backward()) this equals (x − y)·(2s·dL) bit for bit.
    const Tensor dx = raw::binary(BinaryOp::Mul, diff.unpack(*this), g[0]);
    raw::unary_(UnaryOp::MulScalar, dx, 2.0 * scale);
    Tensor dy;
    if (next_edges[1].valid()) dy = mt::detail::reduce_grad(raw::unary(UnaryOp::Neg, dx), target_info);
    return {next_edges[0].valid() ? mt::detail::reduce_grad(dx, input_info) : Tensor(), dy};
  }
  void release_saved() override { diff.reset(), Node::release_saved(); }
  std::string name() const override { return "MseLossBackward"; }
};

}  // namespace

Tensor fused_mse(const Tensor& input, const Tensor& target, bool mean) {
  const Tensor diff = raw::binary(BinaryOp::Sub, input, target);
  Tensor loss = raw::sum(raw::binary(BinaryOp::Mul, diff, diff));
  const double scale = mean ? 1.0 / static_cast<double>(std::max<int64_t>(diff.numel(), 1)) : 1.0;
  if (mean) raw::unary_(UnaryOp::MulScalar, loss, diff.numel() == 0 ? std::nan("") : scale);
  if (auto node = mt::detail::record<MseLossBackward>({&input, &target})) {
    node->diff = SavedTensor::input(diff), node->scale = scale;
    node->input_info = mt::detail::InputInfo(input), node->target_info = mt::detail::InputInfo(target);
    mt::detail::set_history(loss, node);
  }
  return loss;
}

}  // namespace mt::nn::detail

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

// y = x·tanh(softplus(x)). PyTorch's kernel has no threshold; with 20 the two agree in float64 (tanh of
// anything past 19.1 rounds to 1) and exp cannot overflow.
Tensor mish(const Tensor& x) { return x * mt::tanh(softplus(x, 1.0, 20.0)); }

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
  const Tensor u = rand(x.sizes(), gen, {.dtype = x.dtype(), .device = x.device()});
  const Tensor keep = raw::binary(BinaryOp::Ge, u, scalar_tensor(o.p, {.dtype = x.dtype(), .device = x.device()}));
  return x * raw::unary(UnaryOp::MulScalar, keep, 1.0 / (1.0 - o.p));
}

// ---- losses -----------------------------------------------------------------------------------------

namespace {

// Checks (N, C) scores against (N) int64 class indices in [0, C), naming the op and the first bad
// sample. Indices are checked here on the CPU (one pass over N integers); device backends check
// in their gather kernel.
void check_class_targets(const char* op, const Tensor& input, const Tensor& target) {
  MT_CHECK(input.dim() == 2, op, ": input must be (N, C) scores for N samples and C classes, got shape ",
           input.sizes());
  MT_CHECK(is_floating(input.dtype()), op, ": input must be floating-point, got ", input.dtype());
  MT_CHECK(target.dtype() == kInt64, op, ": target must hold int64 class indices, got ", target.dtype(),
           " (one-hot or probability targets are not supported; pass the class index of each sample)");
  const int64_t n = input.size(0), c = input.size(1);
  MT_CHECK(target.dim() == 1 && target.size(0) == n, op, ": target must be (N) = [", n,
           "] class indices for input ", input.sizes(), ", got shape ", target.sizes());
  if (!target.device().is_cpu()) return;
  const Tensor t = raw::contiguous(target);
  const int64_t* idx = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    MT_CHECK(idx[i] >= 0 && idx[i] < c, op, ": target[", i, "] = ", idx[i], " is out of range for ", c,
             " classes (valid class indices are 0..", c - 1, ")");
}

// ℓᵢ = -log_probs[i, target[i]], reduced. Arguments already checked.
Tensor nll(const Tensor& log_probs, const Tensor& target, Reduction reduction) {
  const int64_t n = log_probs.size(0);
  const Tensor picked = mt::gather(log_probs, 1, raw::unsqueeze(target, 1));  // (N, 1)
  switch (reduction) {
    case Reduction::None: return -mt::view(picked, {n});
    case Reduction::Sum: return mt::sum(picked) * -1.0;
    case Reduction::Mean: return mt::sum(picked) * (-1.0 / static_cast<double>(n));
  }
  return picked;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, LossOptions o) {
  MT_CHECK(input.sizes() == target.sizes(), "mse_loss: input ", input.sizes(), " and target ", target.sizes(),
           " must have the same shape (broadcasting them, as PyTorch does with a warning, is nearly always "
           "a bug, e.g. predictions (N, 1) against targets (N): reshape one of them)");
  MT_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "mse_loss: input (", input.dtype(),
           ") and target (", target.dtype(), ") must be floating-point");
  if (o.reduction == Reduction::None) return mt::pow(input - target, 2.0);
  return detail::fused_mse(input, target, o.reduction == Reduction::Mean);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, LossOptions o) {
  check_class_targets("nll_loss", log_probs, target);
  return nll(log_probs, target, o.reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, LossOptions o) {
  check_class_targets("cross_entropy", logits, target);
  return nll(mt::log_softmax(logits, 1), target, o.reduction);
}

}  // namespace mt::nn::functional
