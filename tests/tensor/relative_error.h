// relative_error(a, b): how far a tensor is from a reference, for the tests that compare one
// computation with another (Winograd with im2col, a split kernel with its unsplit form).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "minitrain.h"

namespace mt::test {

// max |a - b| / (1 + max |b|), in double; a and b must have the same shape.
inline double relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / (1 + scale);
}

}  // namespace mt::test
