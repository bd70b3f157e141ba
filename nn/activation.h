// Activation modules: ReLU, Tanh, Sigmoid, GELU, SiLU, LeakyReLU, ELU, Softplus, Mish, Hardswish. Each forward is the functional form (nn/functional.h),
// so the layer adds nothing but a place in a Sequential and a name in the printout.
#pragma once

#include <string>

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

// x·σ(x)
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::silu(x); }
};

struct LeakyReLUOptions {
  double negative_slope = 0.01;
};

// x for x > 0, negative_slope·x otherwise.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(LeakyReLUOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& x) override { return F::leaky_relu(x, options.negative_slope); }
  std::string extra_repr() const override { return "negative_slope=" + repr_number(options.negative_slope); }

  LeakyReLUOptions options;
};

struct ELUOptions {
  double alpha = 1.0;
};

// x for x > 0, α·(eˣ - 1) otherwise.
class ELU : public Module {
 public:
  explicit ELU(ELUOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& x) override { return F::elu(x, options.alpha); }
  std::string extra_repr() const override { return "alpha=" + repr_number(options.alpha); }

  ELUOptions options;
};

struct SoftplusOptions {
  double beta = 1.0;
  double threshold = 20.0;  // above it (in β·x) the result is x itself
};

// log(1 + e^(β·x))/β; see F::softplus.
class Softplus : public Module {
 public:
  explicit Softplus(SoftplusOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& x) override { return F::softplus(x, options.beta, options.threshold); }
  std::string extra_repr() const override {
    return "beta=" + repr_number(options.beta) + ", threshold=" + repr_number(options.threshold);
  }

  SoftplusOptions options;
};

// x·tanh(softplus(x))
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::mish(x); }
};

// x·relu6(x + 3)/6
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return F::hardswish(x); }
};

}  // namespace mt::nn
