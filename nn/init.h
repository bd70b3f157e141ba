// nn::init: fill a tensor in place with the initial values of a weight, as torch.nn.init does.
// Each function runs under NoGradGuard (so it works on parameters that require grad), draws from the
// given Generator (mt::default_generator() by default, which mt::manual_seed seeds), and returns
// its argument.
//
//   nn::init::kaiming_normal_(w, {.nonlinearity = nn::init::Nonlinearity::ReLU});  // He init for ReLU nets
//   nn::init::xavier_uniform_(w, nn::init::calculate_gain(nn::init::Nonlinearity::Tanh));
//
// Fans are computed as PyTorch does, for a weight of shape (out, in, k1, k2, ...):
//   fan_in = in·k1·k2·…,   fan_out = out·k1·k2·…       (at least 2 dims; Linear's (out, in) has no k)
//
// What it does not do: orthogonal_, sparse_, dirac_, eye_, trunc_normal_.
#pragma once

#include <cstdint>

#include "tensor/generator.h"
#include "tensor/tensor.h"

namespace mt::nn::init {

enum class Nonlinearity : uint8_t { Linear, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };
enum class FanMode : uint8_t { FanIn, FanOut };

// The recommended gain for a nonlinearity (PyTorch's calculate_gain): Linear, Sigmoid: 1;
// Tanh: 5/3; ReLU: √2; LeakyReLU: √(2 / (1 + slope²)); SELU: 3/4.
double calculate_gain(Nonlinearity nonlinearity, double negative_slope = 0.01);

struct Fans {
  int64_t fan_in = 0, fan_out = 0;
};
Fans calculate_fans(const Tensor& t);

// U(low, high)
Tensor uniform_(const Tensor& t, double low = 0.0, double high = 1.0, Generator& gen = default_generator());
// N(mean, std²)
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);

// He et al. 2015. std = gain / √fan with gain = calculate_gain(nonlinearity, a) and fan = fan_in or
// fan_out; kaiming_uniform_ draws U(-bound, bound) with bound = √3·std (the same variance).
// Defaults as PyTorch: a = 0, fan_in, leaky_relu (which with a = 0 is ReLU's gain √2).
struct KaimingOptions {
  double a = 0.0;  // the negative slope of the leaky ReLU that follows (LeakyReLU only)
  FanMode mode = FanMode::FanIn;
  Nonlinearity nonlinearity = Nonlinearity::LeakyReLU;
};
Tensor kaiming_uniform_(const Tensor& t, KaimingOptions options = {}, Generator& gen = default_generator());
Tensor kaiming_normal_(const Tensor& t, KaimingOptions options = {}, Generator& gen = default_generator());

// Glorot & Bengio 2010. std = gain·√(2 / (fan_in + fan_out)); xavier_uniform_ draws U(-bound, bound)
// with bound = √3·std.
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0, Generator& gen = default_generator());
Tensor xavier_normal_(const Tensor& t, double gain = 1.0, Generator& gen = default_generator());

}  // namespace mt::nn::init
