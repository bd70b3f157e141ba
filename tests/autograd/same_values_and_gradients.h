// An op against its reference composition (autograd/detail/reference_ops.h), the way the fused-op
// tests (tests/autograd/test_transformer_ops.cpp, test_group_norm.cpp) hold them equal: the same
// values, and the same gradient for every input, of one random weighting of the output.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "minitrain.h"

namespace mt::test {

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// f and g on copies of the same inputs (an undefined input stays undefined): values within tol,
// and gradients of sum(w·f) within tol for every input that requires grad, w drawn from gen.
inline void check_same(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                       const std::function<Tensor(const std::vector<Tensor>&)>& g, const std::vector<Tensor>& inputs,
                       double tol, Generator& gen) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) {
    a.push_back(t.defined() ? t.detach().clone().requires_grad_(t.requires_grad()) : Tensor());
    b.push_back(t.defined() ? t.detach().clone().requires_grad_(t.requires_grad()) : Tensor());
  }
  const Tensor ya = f(a), yb = g(b);
  CHECK(max_abs_diff(ya, yb) <= tol);
  const Tensor w = rand(ya.sizes(), gen, {.dtype = ya.dtype()});
  (ya * w).sum().backward();
  (yb * w).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    INFO("input ", i);
    CHECK(max_abs_diff(a[i].grad(), b[i].grad()) <= tol);
  }
}

}  // namespace mt::test
