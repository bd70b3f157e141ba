// Flatten: merges dims start_dim..end_dim into one, e.g. images (N, 1, 28, 28) -> (N, 784) with the
// defaults, which keep the batch dim. A view when the input's strides allow it, else a copy.
#pragma once

#include <string>

#include "autograd/ops.h"
#include "nn/module.h"

namespace mt::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return mt::flatten(x, start_dim, end_dim); }
  std::string extra_repr() const override {
    return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
  }

  const int64_t start_dim, end_dim;
};

}  // namespace mt::nn
