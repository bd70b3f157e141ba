// fit_standardization and standardize_ (standardize.h; Note [One copy of a dataset]).
#include "data/standardize.h"

#include <algorithm>
#include <cmath>

#include "tensor/raw_ops.h"

namespace mt::data {
namespace {

// Σx and Σ(x - mean)² over n elements, in float64.
template <typename T>
Standardization fit(const T* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    squares += d * d;
  }
  return {.mean = mean, .std = std::max(std::sqrt(squares / static_cast<double>(n)), 1e-6)};
}

}  // namespace

Standardization fit_standardization(const Tensor& x) {
  MT_CHECK(x.device().type == DeviceType::CPU && x.is_contiguous() && (x.dtype() == kFloat32 || x.dtype() == kFloat64),
           "fit_standardization: needs a contiguous float32 or float64 CPU tensor, got ", x.dtype(), " on ",
           x.device().str(), x.is_contiguous() ? "" : " (not contiguous)");
  MT_CHECK(x.numel() > 0, "fit_standardization: the data is empty (shape ", x.sizes(), ")");
  if (x.dtype() == kFloat32) return fit(x.data_ptr<float>(), x.numel());
  return fit(x.data_ptr<double>(), x.numel());
}

void standardize_(const Tensor& x, Standardization s) {
  MT_CHECK(s.std > 0 && std::isfinite(s.mean) && std::isfinite(s.std), "standardize_: mean ", s.mean, " and std ",
           s.std, " are not usable (std must be positive)");
  raw::unary_(UnaryOp::AddScalar, x, -s.mean);
  raw::unary_(UnaryOp::MulScalar, x, 1.0 / s.std);
}

}  // namespace mt::data
