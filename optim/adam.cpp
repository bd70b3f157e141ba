// Adam's and AdamW's update, twice: a fused one-pass loop over the raw data of contiguous CPU
// float32/float64 tensors, and the same formulas in tensor ops for everything else (the tests check
// that both agree).
//
// torch.optim.Adam / AdamW, for a parameter p with gradient g (β1, β2, ε, weight decay λ):
//   t = t + 1
//   g = g + λ·p                        Adam, if λ ≠ 0   (L2: the penalty goes through m and v)
//   p = p·(1 − lr·λ)                   AdamW            (decoupled: the penalty bypasses m and v)
//   m = β1·m + (1 − β1)·g
//   v = β2·v + (1 − β2)·g²
//   v_max = max(v_max, v)              amsgrad: v_max replaces v below
//   m̂ = m / (1 − β1ᵗ),  v̂ = v / (1 − β2ᵗ)
//   p = p − lr·m̂ / (√v̂ + ε)
// The last line is computed as PyTorch computes it, with both corrections folded into scalars:
//   p = p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + ε)
// which is the same value (ε stays outside the correction, exactly as documented).
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "tensor/parallel.h"
#include "tensor/raw_ops.h"

namespace mt::optim {

namespace {

template <typename Options>
void check_adam_options(const Options& o, size_t group) {
  const char* name = Options::kName;
  MT_CHECK(o.lr >= 0, name, ": invalid learning rate ", o.lr, " for param group ", group,
           "; it must be >= 0");
  MT_CHECK(o.eps >= 0, name, ": invalid eps ", o.eps, " for param group ", group, "; it must be >= 0");
  MT_CHECK(o.betas.first >= 0 && o.betas.first < 1, name, ": invalid beta1 (betas.first) ", o.betas.first,
           " for param group ", group, "; it must be in [0, 1)");
  MT_CHECK(o.betas.second >= 0 && o.betas.second < 1, name, ": invalid beta2 (betas.second) ",
           o.betas.second, " for param group ", group, "; it must be in [0, 1)");
  MT_CHECK(o.weight_decay >= 0, name, ": invalid weight_decay ", o.weight_decay, " for param group ", group,
           "; it must be >= 0");
}

// Parameters with more elements than this update on several threads (tensor/parallel.h); measured
// in bench/README.md, "Threads". Adam's element costs a square root and a division.
constexpr int64_t kAdamGrain = 16384;

// One parameter's step in scalars: the options plus the bias corrections of its step count t.
struct AdamStep {
  double beta1, beta2, eps;
  double l2;                     // λ added to the gradient (Adam), else 0
  double decay;                  // p is multiplied by this first (AdamW: 1 − lr·λ), else 1
  double step_size;              // lr / (1 − β1ᵗ)
  double bias_correction2_sqrt;  // √(1 − β2ᵗ)
  bool amsgrad;
};

// p, grad, m, v, v_max: (n) contiguous, dtype T; v_max is null without amsgrad.
// GCC vectorises this loop only with -fno-math-errno: otherwise std::sqrt may have to set errno,
// a side effect that keeps the loop scalar (about 4x slower on large tensors).
template <typename T>
void adam_fused(T* __restrict p, const T* __restrict grad, T* __restrict m, T* __restrict v, T* __restrict v_max,
                int64_t n, const AdamStep& s) {
  // __restrict: the five arrays never overlap, which lets the compiler vectorise the loop.
  const T beta1 = s.beta1, beta2 = s.beta2, one_minus_beta1 = 1 - s.beta1, one_minus_beta2 = 1 - s.beta2;
  const T eps = s.eps, l2 = s.l2, decay = s.decay, neg_step_size = -s.step_size;
  const T bias_correction2_sqrt = s.bias_correction2_sqrt;
  for (int64_t j = 0; j < n; ++j) {
    T g = grad[j];
    if (l2 != 0) g = g + l2 * p[j];                   // Adam:  g = g + λ·p
    if (decay != 1) p[j] = p[j] * decay;              // AdamW: p = p·(1 − lr·λ)
    m[j] = m[j] * beta1 + one_minus_beta1 * g;        // m = β1·m + (1 − β1)·g
    v[j] = v[j] * beta2 + one_minus_beta2 * g * g;    // v = β2·v + (1 − β2)·g²
    T vj = v[j];
    if (v_max) {                                      // v_max = max(v_max, v), keeping a NaN
      v_max[j] = (std::isnan(vj) || vj > v_max[j]) ? vj : v_max[j];  // like torch.maximum
      vj = v_max[j];
    }
    const T denom = std::sqrt(vj) / bias_correction2_sqrt + eps;  // √v̂ + ε, as √v / √(1 − β2ᵗ) + ε
    p[j] = p[j] + neg_step_size * m[j] / denom;                   // p = p − lr·m̂ / (√v̂ + ε)
  }
}

// The same update in tensor ops (any device, any strides). `grad` is never modified; `p` is a
// handle (copies share the data), taken by value because the in-place methods are non-const.
void adam_reference(Tensor p, const Tensor& grad, AdamState& st, const AdamStep& s) {
  Tensor g = grad;
  if (s.l2 != 0) g = g + p * s.l2;
  if (s.decay != 1) p.mul_(s.decay);
  st.exp_avg.mul_(s.beta1).add_(g, 1 - s.beta1);
  st.exp_avg_sq.mul_(s.beta2).add_(g * g, 1 - s.beta2);
  Tensor v = st.exp_avg_sq;
  if (s.amsgrad) {
    st.max_exp_avg_sq.copy_(maximum(st.max_exp_avg_sq, st.exp_avg_sq));
    v = st.max_exp_avg_sq;
  }
  const Tensor denom = sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p.add_(st.exp_avg / denom, -s.step_size);
}

// Adam when `decoupled` is false, AdamW when true.
template <typename Options>
void adam_update(const Tensor& p, const Tensor& grad, AdamState& st, const Options& o, bool decoupled) {
  if (!st.exp_avg.defined()) {
    st.exp_avg = zeros_like(p);
    st.exp_avg_sq = zeros_like(p);
  }
  // Made on the first amsgrad step (or when amsgrad is switched on later: max(0, v) = v).
  if (o.amsgrad && !st.max_exp_avg_sq.defined()) st.max_exp_avg_sq = zeros_like(p);
  st.step += 1;

  const AdamStep s{
      .beta1 = o.betas.first,
      .beta2 = o.betas.second,
      .eps = o.eps,
      .l2 = decoupled ? 0.0 : o.weight_decay,
      .decay = decoupled ? 1 - o.lr * o.weight_decay : 1.0,
      .step_size = o.lr / (1 - std::pow(o.betas.first, st.step)),
      .bias_correction2_sqrt = std::sqrt(1 - std::pow(o.betas.second, st.step)),
      .amsgrad = o.amsgrad,
  };
  if (!detail::fusable(p, grad, st.exp_avg, st.exp_avg_sq, st.max_exp_avg_sq)) {
    return adam_reference(p, grad, st, s);
  }
  MT_DISPATCH_FLOAT(p.dtype(), Options::kName, [&]<typename T>() {
    T* pp = p.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    T* m = st.exp_avg.data_ptr<T>();
    T* v = st.exp_avg_sq.data_ptr<T>();
    T* v_max = o.amsgrad ? st.max_exp_avg_sq.data_ptr<T>() : nullptr;
    // Elements are independent: fixed chunks on the intra-op threads (Note [Fixed chunks]).
    parallel_for(p.numel(), kAdamGrain, [&](int64_t lo, int64_t hi) {
      adam_fused<T>(pp + lo, g + lo, m + lo, v + lo, v_max ? v_max + lo : nullptr, hi - lo, s);
    });
  });
  p.storage()->bump_version();  // an in-place change, like raw ops: autograd's saved copies see it
}

}  // namespace

void AdamOptions::check(size_t group) const { check_adam_options(*this, group); }
void AdamWOptions::check(size_t group) const { check_adam_options(*this, group); }

void Adam::step() {
  for_each_param_with_grad([](const Tensor& p, const Tensor& g, AdamState& st, const AdamOptions& o) {
    adam_update(p, g, st, o, /*decoupled=*/false);
  });
}

void AdamW::step() {
  for_each_param_with_grad([](const Tensor& p, const Tensor& g, AdamState& st, const AdamWOptions& o) {
    adam_update(p, g, st, o, /*decoupled=*/true);
  });
}

}  // namespace mt::optim
