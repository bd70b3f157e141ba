// Loss modules: MSELoss, CrossEntropyLoss, NLLLoss, BCELoss, BCEWithLogitsLoss, KLDivLoss,
// SmoothL1Loss, HuberLoss. Each is the functional form (nn/functional.h)
// with its options kept, behind a common base so a training loop can pick one at run time:
//
//   std::shared_ptr<nn::Loss> loss_fn = std::make_shared<nn::CrossEntropyLoss>();
//   Tensor loss = (*loss_fn)(model->forward(x), y);  // logits (N, C), y (N) int64
//
// A loss takes two inputs, so Loss hides Module's one-input forward: `loss_fn(x)` does not compile.
#pragma once

#include <string>

#include "nn/functional.h"
#include "nn/module.h"

namespace mt::nn {

class Loss : public Module {
 public:
  explicit Loss(LossOptions options) : options(options) {}
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override { return std::string("reduction=") + reduction_name(options.reduction); }

  LossOptions options;

 private:
  using Module::forward;
  using Module::operator();
};

// (input - target)², reduced. input and target: the same shape.
class MSELoss : public Loss {
 public:
  explicit MSELoss(LossOptions options = {}) : Loss(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return F::mse_loss(input, target, options);
  }
};

// -log_softmax(logits)[i, target[i]], weighted, smoothed and reduced as F::cross_entropy.
// logits: (N, C)  target: (N) int64 class indices. A class weight is a buffer named "weight", as in
// PyTorch's state dict, so it moves with the module.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions o = {})
      : Loss({.reduction = o.reduction}), ignore_index(o.ignore_index), label_smoothing(o.label_smoothing) {
    if (o.weight.defined()) weight = register_buffer("weight", o.weight);
  }
  Tensor forward(const Tensor& logits, const Tensor& target) override {
    return F::cross_entropy(logits, target, {.reduction = options.reduction, .weight = weight,
                                             .ignore_index = ignore_index, .label_smoothing = label_smoothing});
  }
  std::string extra_repr() const override {
    std::string s = Loss::extra_repr();
    if (ignore_index != -100) s += ", ignore_index=" + std::to_string(ignore_index);
    if (label_smoothing != 0.0) s += ", label_smoothing=" + repr_number(label_smoothing);
    return s;
  }

  Tensor weight;  // (C), or undefined
  int64_t ignore_index;
  double label_smoothing;
};

// -log_probs[i, target[i]], weighted and reduced as F::nll_loss. log_probs: (N, C)  target: (N) int64.
class NLLLoss : public Loss {
 public:
  explicit NLLLoss(NLLLossOptions o = {}) : Loss({.reduction = o.reduction}), ignore_index(o.ignore_index) {
    if (o.weight.defined()) weight = register_buffer("weight", o.weight);
  }
  Tensor forward(const Tensor& log_probs, const Tensor& target) override {
    return F::nll_loss(log_probs, target, {.reduction = options.reduction, .weight = weight, .ignore_index = ignore_index});
  }

  Tensor weight;  // (C), or undefined
  int64_t ignore_index;
};

// Binary cross-entropy of probabilities in [0, 1]; see F::binary_cross_entropy.
class BCELoss : public Loss {
 public:
  explicit BCELoss(BCEOptions o = {}) : Loss({.reduction = o.reduction}) {
    if (o.weight.defined()) weight = register_buffer("weight", o.weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return F::binary_cross_entropy(input, target, {.reduction = options.reduction, .weight = weight});
  }

  Tensor weight{};
};

// Binary cross-entropy of logits, stable for any logit; see F::binary_cross_entropy_with_logits.
class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsOptions o = {}) : Loss({.reduction = o.reduction}) {
    if (o.weight.defined()) weight = register_buffer("weight", o.weight);
    if (o.pos_weight.defined()) pos_weight = register_buffer("pos_weight", o.pos_weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return F::binary_cross_entropy_with_logits(input, target,
                                               {.reduction = options.reduction, .weight = weight, .pos_weight = pos_weight});
  }

  Tensor weight, pos_weight;
};

// KL divergence of target from input (log-probabilities); see F::kl_div. Use kBatchMean for the
// divergence per sample; kMean (PyTorch's default) divides by the number of elements.
class KLDivLoss : public Loss {
 public:
  explicit KLDivLoss(KLDivOptions o = {}) : Loss({.reduction = o.reduction}), log_target(o.log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return F::kl_div(input, target, {.reduction = options.reduction, .log_target = log_target});
  }
  std::string extra_repr() const override {
    return Loss::extra_repr() + (log_target ? ", log_target=true" : "");
  }

  bool log_target;
};

// Quadratic below |input - target| = beta, linear above; see F::smooth_l1_loss.
class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(SmoothL1Options o = {}) : Loss({.reduction = o.reduction}), beta(o.beta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return F::smooth_l1_loss(input, target, {.reduction = options.reduction, .beta = beta});
  }
  std::string extra_repr() const override { return Loss::extra_repr() + ", beta=" + repr_number(beta); }

  double beta;
};

// Quadratic below |input - target| = delta, linear above; see F::huber_loss.
class HuberLoss : public Loss {
 public:
  explicit HuberLoss(HuberOptions o = {}) : Loss({.reduction = o.reduction}), delta(o.delta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return F::huber_loss(input, target, {.reduction = options.reduction, .delta = delta});
  }
  std::string extra_repr() const override { return Loss::extra_repr() + ", delta=" + repr_number(delta); }

  double delta;
};

}  // namespace mt::nn
