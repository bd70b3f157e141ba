// Adam and AdamW: adaptive moment estimation with bias correction, with torch.optim.Adam's and
// torch.optim.AdamW's exact updates (written next to the code in adam.cpp). The two differ only in
// weight decay: Adam adds λ·p to the gradient (L2, so the penalty is rescaled by the adaptive step);
// AdamW shrinks p by (1 − lr·λ) before the update, decoupled from the gradient (Loshchilov & Hutter).
//
//   optim::AdamW opt(model.parameters(), {.lr = 3e-4, .betas = {0.9, 0.95}, .weight_decay = 0.1});
//
// What it does: amsgrad; a fused one-pass loop for contiguous CPU float32/float64 tensors, tensor
// ops for the rest. What it does not do: maximize, capturable/differentiable, foreach kernels.
#pragma once

#include <utility>

#include "optim/optimizer.h"

namespace mt::optim {

struct AdamOptions {
  static constexpr const char* kName = "Adam";
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // β1, β2: decay of the first and second moments
  double eps = 1e-8;                               // ε: added to √v̂, keeps the step finite
  double weight_decay = 0.0;                       // λ: L2 penalty, added to the gradient
  bool amsgrad = false;                            // normalise by the largest v̂ seen so far

  // Throws naming the option and the group: lr >= 0, eps >= 0, 0 <= β < 1, weight_decay >= 0.
  void check(size_t group) const;

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    f("lr", o.lr);
    f("beta1", o.betas.first);
    f("beta2", o.betas.second);
    f("eps", o.eps);
    f("weight_decay", o.weight_decay);
    f("amsgrad", o.amsgrad);
  }
};

// AdamOptions with AdamW's default weight decay (0.01, like torch.optim.AdamW).
struct AdamWOptions {
  static constexpr const char* kName = "AdamW";
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // λ: decoupled, p = p·(1 − lr·λ) before the Adam step
  bool amsgrad = false;

  void check(size_t group) const;

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    AdamOptions::fields(o, f);
  }
};

struct AdamState {
  double step = 0;        // t: updates made so far (the bias corrections use it)
  Tensor exp_avg;         // m: running mean of the gradient
  Tensor exp_avg_sq;      // v: running mean of the squared gradient
  Tensor max_exp_avg_sq;  // max over steps of v (amsgrad only)

  bool empty() const { return step == 0; }
  template <typename Self, typename Options, typename F>
  static void fields(Self& s, const Options& o, F&& f) {
    f("step", s.step);
    f("exp_avg", s.exp_avg);
    f("exp_avg_sq", s.exp_avg_sq);
    if (o.amsgrad) f("max_exp_avg_sq", s.max_exp_avg_sq);
  }
};

class Adam : public OptimizerBase<AdamOptions, AdamState> {
 public:
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {})
      : OptimizerBase(std::move(params), options) {}
  void step() override;
};

class AdamW : public OptimizerBase<AdamWOptions, AdamState> {
 public:
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {})
      : OptimizerBase(std::move(params), options) {}
  void step() override;
};

}  // namespace mt::optim
