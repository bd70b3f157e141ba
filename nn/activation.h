// Activation modules: ReLU, Tanh, Sigmoid, GELU. Each forward is the functional form (nn/functional.h),
// so the layer adds nothing but a place in a Sequential and a name in the printout.
#pragma once

#include "nn/functional.h"
#include "nn/module.h"

namespace mt::nn {

// max(x, 0); one op, its backward masks dy with [y > 0].
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::relu(x); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::tanh(x); }
};

// 1 / (1 + e⁻ˣ)
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::sigmoid(x); }
};

struct GELUOptions {
  GeluApproximate approximate = GeluApproximate::None;  // None: the exact erf form, PyTorch's default
};

// x·Φ(x), exactly or with the tanh approximation; see F::gelu.
class GELU : public Module {
 public:
  explicit GELU(GELUOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& x) override { return F::gelu(x, options.approximate); }
  std::string extra_repr() const override {
    return options.approximate == GeluApproximate::Tanh ? "approximate='tanh'" : "";
  }

  GELUOptions options;
};

}  // namespace mt::nn
