// nn::functional's losses, composed from differentiable ops (autograd/ops.h), and mse_loss's fused
// node. Masks, class weights and checks use raw ops (tensor/raw_ops.h): they need no gradient.
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/record.h"
#include "nn/functional.h"
#include "tensor/raw_ops.h"

namespace mt::nn {

const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
    case Reduction::BatchMean: return "batchmean";
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

namespace {

void check_reduction(const char* op, Reduction reduction) {
  MT_CHECK(reduction != Reduction::BatchMean || std::string(op) == "kl_div", op,
           ": reduction 'batchmean' is kl_div's only; use kMean or kSum");
}

// Per-element (or per-sample) losses reduced as asked; 'batchmean' only where `op` is kl_div.
Tensor reduce(const Tensor& losses, Reduction reduction, const char* op) {
  check_reduction(op, reduction);
  switch (reduction) {
    case Reduction::None: return losses;
    case Reduction::Sum: return mt::sum(losses);
    case Reduction::Mean: return mt::mean(losses);
    case Reduction::BatchMean:
      return mt::sum(losses) * (1.0 / static_cast<double>(losses.dim() == 0 ? 1 : losses.size(0)));
  }
  return losses;
}

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  MT_CHECK(input.sizes() == target.sizes(), op, ": input ", input.sizes(), " and target ", target.sizes(),
           " must have the same shape (broadcasting them, as PyTorch does with a warning, is nearly always "
           "a bug, e.g. predictions (N, 1) against targets (N): reshape one of them)");
  MT_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op, ": input (", input.dtype(),
           ") and target (", target.dtype(), ") must be floating-point");
}

// Checks (N, C) scores against (N) int64 class indices in [0, C) or equal to ignore_index, naming the
// op and the first bad sample, and a class weight of shape (C). Indices are checked here on the CPU
// (one pass over N integers); device backends check in their gather kernel. Returns whether some
// target may be ignore_index: known on the CPU, assumed elsewhere (finding out would wait for the device).
bool check_class_targets(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                         int64_t ignore_index) {
  MT_CHECK(input.dim() == 2, op, ": input must be (N, C) scores for N samples and C classes, got shape ",
           input.sizes());
  MT_CHECK(is_floating(input.dtype()), op, ": input must be floating-point, got ", input.dtype());
  MT_CHECK(target.dtype() == kInt64, op, ": target must hold int64 class indices, got ", target.dtype(),
           " (one-hot or probability targets are not supported; pass the class index of each sample)");
  const int64_t n = input.size(0), c = input.size(1);
  MT_CHECK(target.dim() == 1 && target.size(0) == n, op, ": target must be (N) = [", n,
           "] class indices for input ", input.sizes(), ", got shape ", target.sizes());
  MT_CHECK(!weight.defined() || (weight.dim() == 1 && weight.size(0) == c), op, ": weight must be (C) = [", c,
           "], one per class, got shape ", weight.sizes());
  if (!target.device().is_cpu()) return true;
  const Tensor t = raw::contiguous(target);
  const int64_t* idx = t.data_ptr<int64_t>();
  bool any_ignored = false;
  for (int64_t i = 0; i < n; ++i) {
    any_ignored = any_ignored || idx[i] == ignore_index;
    MT_CHECK(idx[i] == ignore_index || (idx[i] >= 0 && idx[i] < c), op, ": target[", i, "] = ", idx[i],
             " is out of range for ", c, " classes (valid class indices are 0..", c - 1, "); ignore_index is ",
             ignore_index);
  }
  return any_ignored;
}

// What the class losses weigh each sample by: wᵢ = weight[tᵢ] (1 without weight), 0 where tᵢ is
// ignore_index; and the targets with the ignored ones replaced by class 0, so gather can read them.
struct SampleWeights {
  Tensor w;       // (N), input's dtype
  Tensor kept;    // (N), input's dtype: 1, or 0 where the target is ignore_index
  Tensor safe_t;  // (N) int64 in [0, C)
};
SampleWeights sample_weights(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index) {
  const TensorOptions idx{.dtype = kInt64, .device = target.device()};
  const Tensor kept = raw::binary(BinaryOp::Ne, target, scalar_tensor(static_cast<double>(ignore_index), idx));
  const Tensor safe_t = raw::where(kept, target, scalar_tensor(0.0, idx));
  const Tensor kept_f = raw::cast(kept, input.dtype());
  Tensor w = kept_f;
  if (weight.defined()) w = raw::binary(BinaryOp::Mul, w, raw::index_select(raw::cast(weight, input.dtype()), 0, safe_t));
  return {w, kept_f, safe_t};
}

// ℓᵢ = -log_probs[i, tᵢ], reduced: the common case (no weights, nothing ignored) in the fewest ops,
// since a training step pays each op's overhead.
Tensor plain_nll(const Tensor& log_probs, const Tensor& target, Reduction reduction, const char* op) {
  check_reduction(op, reduction);
  const int64_t n = log_probs.size(0);
  const Tensor picked = mt::view(mt::gather(log_probs, 1, raw::unsqueeze(target, 1)), {n});  // (N)
  if (reduction == Reduction::Mean) return mt::sum(picked) * (-1.0 / static_cast<double>(n));
  return reduce(-picked, reduction, op);
}

// ℓᵢ = log Σ_c e^{x_ic} − x_i,tᵢ, reduced: the common case as one node on the logits as they come,
// 16-bit ones computed in float32 inside it (Note [Cross-entropy in row blocks]), so under autocast
// the loss is float32 as a float32 op's, without a float32 copy of the logits. Without autocast a
// 16-bit loss is rounded back to its logits' dtype, as the composition and PyTorch return it.
Tensor plain_cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction) {
  Tensor loss = reduce(detail::cross_entropy_rows(logits, target), reduction, "cross_entropy");  // from (N)
  if (is_low_precision(logits.dtype()) && !autocast::is_enabled()) loss = mt::cast(loss, logits.dtype());
  return loss;
}

// ℓᵢ = -wᵢ·log_probs[i, tᵢ], reduced; 'mean' divides by Σ wᵢ. Arguments already checked.
Tensor nll(const Tensor& log_probs, const SampleWeights& s, Reduction reduction, const char* op) {
  const int64_t n = log_probs.size(0);
  const Tensor picked = mt::view(mt::gather(log_probs, 1, raw::unsqueeze(s.safe_t, 1)), {n});  // (N)
  const Tensor losses = -(picked * s.w);
  check_reduction(op, reduction);
  if (reduction == Reduction::Mean) return mt::sum(losses) / raw::sum(s.w);
  return reduce(losses, reduction, op);
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, LossOptions o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]). Asked first, so that the
  // seed job's step (2 µs) copies no tensor handle without autocast.
  if (autocast::is_enabled() && (is_low_precision(input.dtype()) || is_low_precision(target.dtype())))
    return mse_loss(autocast::to_float32(input), autocast::to_float32(target), o);
  check_same_shape("mse_loss", input, target);
  check_reduction("mse_loss", o.reduction);
  if (o.reduction == Reduction::None) return mt::pow(input - target, 2.0);
  return detail::fused_mse(input, target, o.reduction == Reduction::Mean);
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, NLLLossOptions o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor log_probs = autocast::to_float32(log_probs_in);
  const bool may_ignore = check_class_targets("nll_loss", log_probs, target, o.weight, o.ignore_index);
  if (!o.weight.defined() && !may_ignore) return plain_nll(log_probs, target, o.reduction, "nll_loss");
  return nll(log_probs, sample_weights(log_probs, target, o.weight, o.ignore_index), o.reduction, "nll_loss");
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, CrossEntropyOptions o) {
  const bool may_ignore = check_class_targets("cross_entropy", logits_in, target, o.weight, o.ignore_index);
  MT_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ",
           o.label_smoothing);
  check_reduction("cross_entropy", o.reduction);
  if (!o.weight.defined() && !may_ignore && o.label_smoothing == 0.0)
    return plain_cross_entropy(logits_in, target, o.reduction);
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor logits = autocast::to_float32(logits_in);
  const Tensor log_probs = mt::log_softmax(logits, 1);
  const SampleWeights s = sample_weights(logits, target, o.weight, o.ignore_index);
  const Tensor hard = nll(log_probs, s, o.reduction, "cross_entropy");
  if (o.label_smoothing == 0.0) return hard;
  // The uniform part: uᵢ = -Σ_c w[c]·log_probs[i, c], 0 for an ignored sample; 'mean' divides by the
  // same Σ wᵢ as the nll part (without weights: the number of samples not ignored).
  const Tensor weighted = o.weight.defined() ? log_probs * raw::cast(o.weight, logits.dtype()) : log_probs;
  const Tensor uniform = -(mt::sum(weighted, {1}) * s.kept);
  const Tensor smooth = o.reduction == Reduction::Mean ? mt::sum(uniform) / raw::sum(s.w) : reduce(uniform, o.reduction, "cross_entropy");
  const int64_t c = logits.size(1);
  return hard * (1.0 - o.label_smoothing) + smooth * (o.label_smoothing / static_cast<double>(c));
}

// ℓ = -w·(t·max(log x, -100) + (1 - t)·max(log(1 - x), -100)), with log(1 - x) as log1p(-x).
// dℓ/dx = -w·(t/x - (1 - t)/(1 - x)) = w·(x - t)/(x·(1 - x)) inside the clamp; PyTorch's node writes
// the right side, which equals it to rounding.
Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, BCEOptions o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor input = autocast::to_float32(input_in), target = autocast::to_float32(target_in);
  check_same_shape("binary_cross_entropy", input, target);
  const Tensor log_x = mt::clamp(mt::log(input), -100.0, std::nullopt);
  const Tensor log_1mx = mt::clamp(mt::log1p(-input), -100.0, std::nullopt);
  Tensor losses = -(target * log_x + (1.0 - target) * log_1mx);
  if (o.weight.defined()) losses = losses * o.weight;
  return reduce(losses, o.reduction, "binary_cross_entropy");
}

// Note [Stable log(1 + e^-x)]: log(1 + e⁻ˣ) overflows for x below about -709 (e⁻ˣ = inf), and
// σ(x) then log(σ(x)) loses everything once σ rounds to 0 or 1. With m = max(-x, 0),
// log(1 + e⁻ˣ) = m + log(e⁻ᵐ + e⁻ˣ⁻ᵐ), where both exponents are <= 0 and one of them is 0: nothing
// overflows, and the sum inside the log is in [1, 2]. m is a clamp, whose gradient passes at its
// bound, so at x = 0 the derivative is the true -1/2 (a relu would give 0 there). It is PyTorch's form.
//   ℓ = (1 - t)·x + lw·log(1 + e⁻ˣ),  lw = 1 + (p - 1)·t   =>   dℓ/dx = (1 - t) - lw·σ(-x)
Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in, BCEWithLogitsOptions o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor input = autocast::to_float32(input_in), target = autocast::to_float32(target_in);
  check_same_shape("binary_cross_entropy_with_logits", input, target);
  const Tensor m = mt::clamp(-input, 0.0, std::nullopt);
  const Tensor softplus_neg = m + mt::log(mt::exp(-m) + mt::exp(-input - m));  // log(1 + e⁻ˣ)
  const Tensor log_weight = o.pos_weight.defined() ? (o.pos_weight - 1.0) * target + 1.0 : Tensor();
  Tensor losses = (1.0 - target) * input + (log_weight.defined() ? log_weight * softplus_neg : softplus_neg);
  if (o.weight.defined()) losses = losses * o.weight;
  return reduce(losses, o.reduction, "binary_cross_entropy_with_logits");
}

// ℓ = t·(log t - input), with t·log t read as 0 at t = 0 (its limit; PyTorch's xlogy). The log sees 1
// there instead of 0 (Note [Guarded branches] in nn/functional.cpp): log 0 = -inf, and 0·-inf = NaN
// in the value and in the gradient.   dℓ/dinput = -t
// With log_target:  ℓ = eᵗ·(t - input)   =>   dℓ/dinput = -eᵗ
Tensor kl_div(const Tensor& input_in, const Tensor& target_in, KLDivOptions o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor input = autocast::to_float32(input_in), target = autocast::to_float32(target_in);
  check_same_shape("kl_div", input, target);
  Tensor losses;
  if (o.log_target) {
    losses = mt::exp(target) * (target - input);
  } else {
    const Tensor positive = mt::gt(target, zeros(Shape{}, {.dtype = target.dtype(), .device = target.device()}));
    const Tensor xlogx = target * mt::log(mt::where(positive, target, 1.0));
    losses = xlogx - target * input;
  }
  return reduce(losses, o.reduction, "kl_div");
}

// Both halves are finite everywhere, so where() needs no guard; at |d| = β they meet with equal slope.
//   dℓ/dinput = d/β where |d| < β, else sign(d)
Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, SmoothL1Options o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor input = autocast::to_float32(input_in), target = autocast::to_float32(target_in);
  check_same_shape("smooth_l1_loss", input, target);
  MT_CHECK(o.beta >= 0.0, "smooth_l1_loss: beta must be >= 0, got ", o.beta);
  const Tensor d = input - target;
  const Tensor abs_d = mt::abs(d);
  if (o.beta == 0.0) return reduce(abs_d, o.reduction, "smooth_l1_loss");  // the L1 loss; d²/0 would be NaN
  const Tensor inside = mt::lt(abs_d, scalar_tensor(o.beta, {.dtype = d.dtype(), .device = d.device()}));
  const Tensor losses = mt::where(inside, d * d * (0.5 / o.beta), abs_d - 0.5 * o.beta);
  return reduce(losses, o.reduction, "smooth_l1_loss");
}

//   dℓ/dinput = d where |d| < δ, else δ·sign(d)
Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, HuberOptions o) {
  // Under autocast every loss runs in float32 (Note [Autocast op lists]).
  const Tensor input = autocast::to_float32(input_in), target = autocast::to_float32(target_in);
  check_same_shape("huber_loss", input, target);
  MT_CHECK(o.delta > 0.0, "huber_loss: delta must be > 0, got ", o.delta);
  const Tensor d = input - target;
  const Tensor abs_d = mt::abs(d);
  const Tensor inside = mt::lt(abs_d, scalar_tensor(o.delta, {.dtype = d.dtype(), .device = d.device()}));
  const Tensor losses = mt::where(inside, d * d * 0.5, (abs_d - 0.5 * o.delta) * o.delta);
  return reduce(losses, o.reduction, "huber_loss");
}

}  // namespace mt::nn::functional
