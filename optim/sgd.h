// SGD: stochastic gradient descent with optional momentum, dampening, Nesterov momentum and L2
// weight decay, with torch.optim.SGD's exact update (written next to the code in sgd.cpp).
//
//   optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
//   loss.backward(); opt.step(); opt.zero_grad();
//
// What it does not do: `maximize`, sparse gradients, or foreach (multi-tensor) kernels; a fused loop
// per parameter serves contiguous CPU float32/float64 tensors, other tensors go through raw ops.
#pragma once

#include <limits>

#include "optim/optimizer.h"

namespace mt::optim {

struct SGDOptions {
  static constexpr const char* kName = "SGD";
  // Required, like torch.optim.SGD's lr (NaN means "not given" and is rejected).
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0.0;      // μ
  double dampening = 0.0;     // τ: the share of the new gradient left out of the buffer
  double weight_decay = 0.0;  // λ: L2 penalty, added to the gradient
  bool nesterov = false;

  // Throws naming the option and the group: lr >= 0, momentum >= 0, weight_decay >= 0, and
  // nesterov only with momentum > 0 and dampening = 0 (PyTorch's rules).
  void check(size_t group) const;

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    f("lr", o.lr);
    f("momentum", o.momentum);
    f("dampening", o.dampening);
    f("weight_decay", o.weight_decay);
    f("nesterov", o.nesterov);
  }
};

struct SGDState {
  Tensor momentum_buffer;  // b, shaped like the parameter; made on the first step with momentum

  bool empty() const { return !momentum_buffer.defined(); }
  template <typename Self, typename F>
  static void fields(Self& s, const SGDOptions&, F&& f) {
    f("momentum_buffer", s.momentum_buffer);
  }
};

class SGD : public OptimizerBase<SGDOptions, SGDState> {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options) : OptimizerBase(std::move(params), options) {}
  void step() override;
};

}  // namespace mt::optim
