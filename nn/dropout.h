// Dropout: zeroes each element with probability p while training and scales the rest by 1/(1-p)
// (inverted dropout, F::dropout); in eval mode, or with p = 0, it is the identity.
// The mask is drawn from a Generator: mt::default_generator() unless the options name one, which
// makes a run reproducible from its seed (and, with one generator per rank, independent across ranks).
#pragma once

#include <sstream>
#include <string>

#include "nn/functional.h"
#include "nn/module.h"

namespace mt::nn {

struct DropoutOptions {
  double p = 0.5;
  Generator* generator = nullptr;  // not owned; must outlive the module. null: the default generator
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : Dropout(DropoutOptions{.p = p}) {}
  explicit Dropout(DropoutOptions options) : options(options) {
    MT_CHECK(options.p >= 0.0 && options.p <= 1.0, "Dropout: p must be in [0, 1], got ", options.p);
  }
  Tensor forward(const Tensor& x) override {
    return F::dropout(x, {.p = options.p, .training = is_training(), .generator = options.generator});
  }
  std::string extra_repr() const override {
    std::ostringstream os;
    os << "p=" << options.p;
    return os.str();
  }

  DropoutOptions options;
};

}  // namespace mt::nn
