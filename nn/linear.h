// Linear: y = x·Wᵀ + b, the fully connected layer, initialised like PyTorch's nn.Linear.
//   x: (..., in_features)  weight: (out_features, in_features)  bias: (out_features)  y: (..., out_features)
// forward is one fused op (mt::linear): the bias is written into the output and the GEMM
// accumulates onto it, so there is no temporary for x·Wᵀ and no separate bias add.
#pragma once

#include "nn/module.h"

namespace mt::nn {

struct LinearOptions {
  bool bias = true;  // false: y = x·Wᵀ, no "bias" parameter
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  // Draws new initial values (what the constructor does): weight and bias ~ U(-1/√in, 1/√in),
  // weight first, from mt::default_generator().
  void reset_parameters();

  const int64_t in_features, out_features;
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined without bias
};

}  // namespace mt::nn
