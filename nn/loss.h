// Loss modules: MSELoss, CrossEntropyLoss, NLLLoss. Each is the functional form (nn/functional.h)
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

// -log_softmax(logits)[i, target[i]], reduced. logits: (N, C)  target: (N) int64 class indices.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(LossOptions options = {}) : Loss(options) {}
  Tensor forward(const Tensor& logits, const Tensor& target) override {
    return F::cross_entropy(logits, target, options);
  }
};

// -log_probs[i, target[i]], reduced. log_probs: (N, C)  target: (N) int64 class indices.
class NLLLoss : public Loss {
 public:
  explicit NLLLoss(LossOptions options = {}) : Loss(options) {}
  Tensor forward(const Tensor& log_probs, const Tensor& target) override {
    return F::nll_loss(log_probs, target, options);
  }
};

}  // namespace mt::nn
