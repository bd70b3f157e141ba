// gradcheck: compares autograd's gradient with central finite differences, in float64.
// For f: inputs -> output, it draws a fixed random weight tensor w of the output's shape and checks
// d(sum(w * f(x)))/dx from backward against (L(x + eps) - L(x - eps)) / 2eps for every element of
// every input that requires grad. A random projection of the Jacobian catches the same errors as the
// full Jacobian with overwhelming probability, at the cost of one backward.
#pragma once

#include <functional>
#include <string>

#include "tensor/tensor.h"

namespace mt {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-4;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
};

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace mt
