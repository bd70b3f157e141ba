// Helpers shared by the optim tests: parameters in either memory layout, and running an optimizer
// over a fixed sequence of hand-set gradients.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "minitrain.h"
#include "optim/optim.h"
#include "tensor/raw_ops.h"

namespace mt::optim::test {

// Contiguous parameters take the optimizers' fused loops; strided ones (every other element of a
// larger buffer) take the tensor-op path. Running a case in both layouts checks both.
enum class Layout { Contiguous, Strided };

inline const char* layout_name(Layout l) { return l == Layout::Contiguous ? "contiguous" : "strided"; }

// A leaf that requires grad, holding `values` (row-major) in `shape`.
inline Tensor make_param(const std::vector<double>& values, const Shape& shape, DType dtype, Layout layout) {
  Tensor dense = from_vector(values, shape, {.dtype = kFloat64}).to(dtype);
  Tensor p = dense;
  if (layout == Layout::Strided) {
    Tensor buffer = zeros({2 * dense.numel()}, {.dtype = dtype});
    Shape strides = contiguous_strides(shape);
    for (int64_t& s : strides) s *= 2;
    p = raw::as_strided(buffer, shape, strides, 0);
    raw::copy_(p, dense);
    REQUIRE(!p.is_contiguous());
  }
  p.requires_grad_();
  return p;
}

// Sets p's gradient to each of `grads` in turn and steps; returns p's values after each step.
inline std::vector<std::vector<double>> run_steps(Optimizer& opt, const Tensor& p,
                                                  const std::vector<std::vector<double>>& grads) {
  std::vector<std::vector<double>> after;
  for (const std::vector<double>& g : grads) {
    p.set_grad(from_vector(g, p.sizes(), {.dtype = kFloat64}).to(p.dtype()));
    opt.step();
    after.push_back(p.to_vector<double>());
  }
  return after;
}

// Element-wise comparison with a relative tolerance (doctest's Approx, scale 1).
inline void check_close(const std::vector<std::vector<double>>& actual,
                        const std::vector<std::vector<double>>& expected, double eps) {
  REQUIRE(actual.size() == expected.size());
  for (size_t s = 0; s < actual.size(); ++s) {
    REQUIRE(actual[s].size() == expected[s].size());
    for (size_t j = 0; j < actual[s].size(); ++j) {
      INFO("step ", s + 1, ", element ", j);
      CHECK(actual[s][j] == doctest::Approx(expected[s][j]).epsilon(eps));
    }
  }
}

// Repeats each row of `rows` `n` times: the expected values of an n-element parameter whose
// elements all follow the same scalar sequence.
inline std::vector<std::vector<double>> repeat_each(const std::vector<double>& rows, size_t n) {
  std::vector<std::vector<double>> out;
  for (double r : rows) out.emplace_back(n, r);
  return out;
}

}  // namespace mt::optim::test
