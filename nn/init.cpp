// nn::init: the fills, the fans and the gains. Random fills go through raw::uniform_/normal_, which
// write a contiguous tensor; a strided one is filled through a contiguous temporary.
#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/raw_ops.h"

namespace mt::nn::init {

namespace {

enum class Dist { Uniform, Normal };

Tensor fill_random(const char* op, const Tensor& t, Dist dist, double a, double b, Generator& gen) {
  MT_CHECK(t.defined(), "init::", op, ": undefined tensor");
  MT_CHECK(is_floating(t.dtype()), "init::", op, ": needs a floating-point tensor, got ", t.dtype());
  NoGradGuard no_grad;
  const Tensor dst = t.is_contiguous() ? t : empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
  if (dist == Dist::Uniform) raw::uniform_(dst, gen, a, b);
  else raw::normal_(dst, gen, a, b);
  if (!dst.is_same(t)) raw::copy_(t, dst);
  return t;
}

double kaiming_std(const char* op, const Tensor& t, const KaimingOptions& o) {
  const Fans fans = calculate_fans(t);
  const int64_t fan = o.mode == FanMode::FanIn ? fans.fan_in : fans.fan_out;
  MT_CHECK(fan > 0, "init::", op, ": the ", o.mode == FanMode::FanIn ? "fan_in" : "fan_out", " of a tensor of shape ",
           t.sizes(), " is 0");
  return calculate_gain(o.nonlinearity, o.a) / std::sqrt(static_cast<double>(fan));
}

double xavier_std(const char* op, const Tensor& t, double gain) {
  const Fans fans = calculate_fans(t);
  MT_CHECK(fans.fan_in + fans.fan_out > 0, "init::", op, ": a tensor of shape ", t.sizes(), " has no fans");
  return gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double negative_slope) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
    case Nonlinearity::SELU: return 3.0 / 4.0;
  }
  return 1.0;
}

// weight (out, in, k1, k2, ...): fan_in = in·k1·k2·…, fan_out = out·k1·k2·…
Fans calculate_fans(const Tensor& t) {
  MT_CHECK(t.dim() >= 2, "init: fan_in and fan_out need a tensor of at least 2 dims, got shape ", t.sizes());
  int64_t receptive_field = 1;
  for (int d = 2; d < t.dim(); ++d) receptive_field *= t.size(d);
  return {.fan_in = t.size(1) * receptive_field, .fan_out = t.size(0) * receptive_field};
}

Tensor uniform_(const Tensor& t, double low, double high, Generator& gen) {
  MT_CHECK(low <= high, "init::uniform_: low ", low, " is above high ", high);
  return fill_random("uniform_", t, Dist::Uniform, low, high, gen);
}

Tensor normal_(const Tensor& t, double mean, double std, Generator& gen) {
  MT_CHECK(std >= 0.0, "init::normal_: std must be non-negative, got ", std);
  return fill_random("normal_", t, Dist::Normal, mean, std, gen);
}

Tensor constant_(const Tensor& t, double value) {
  MT_CHECK(t.defined(), "init::constant_: undefined tensor");
  NoGradGuard no_grad;
  raw::fill_(t, value);
  return t;
}

Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, KaimingOptions o, Generator& gen) {
  const double bound = std::sqrt(3.0) * kaiming_std("kaiming_uniform_", t, o);
  return fill_random("kaiming_uniform_", t, Dist::Uniform, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, KaimingOptions o, Generator& gen) {
  return fill_random("kaiming_normal_", t, Dist::Normal, 0.0, kaiming_std("kaiming_normal_", t, o), gen);
}

Tensor xavier_uniform_(const Tensor& t, double gain, Generator& gen) {
  const double bound = std::sqrt(3.0) * xavier_std("xavier_uniform_", t, gain);
  return fill_random("xavier_uniform_", t, Dist::Uniform, -bound, bound, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator& gen) {
  return fill_random("xavier_normal_", t, Dist::Normal, 0.0, xavier_std("xavier_normal_", t, gain), gen);
}

}  // namespace mt::nn::init
