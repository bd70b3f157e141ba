// Gradient-norm clipping (see clip_grad.h): one pass to measure, one pass to scale. The norm is
// accumulated in double whatever the gradients' dtype, so it does not lose small terms in float32.
#include "optim/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/raw_ops.h"

namespace mt::optim {

namespace {

// Σ |g|^p over one gradient (max |g| when p is infinite), on the host.
double partial_norm(const Tensor& g, double p) {
  const bool inf = std::isinf(p);
  if (g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)) {
    return MT_DISPATCH_FLOAT(g.dtype(), "clip_grad_norm_", [&]<typename T>() {
      const T* x = g.data_ptr<T>();
      double acc = 0;
      for (int64_t j = 0; j < g.numel(); ++j) {
        const double a = std::abs(static_cast<double>(x[j]));
        if (inf) {
          acc = (std::isnan(a) || a > acc) ? a : acc;  // keeps a NaN, like torch.max
        } else {
          acc += p == 2 ? a * a : (p == 1 ? a : std::pow(a, p));
        }
      }
      return acc;
    });
  }
  // Any other device or layout: the same sum in raw ops, in double.
  const Tensor a = raw::unary(UnaryOp::Abs, raw::cast(g, kFloat64));
  if (inf) return raw::max(a).item();
  return raw::sum(raw::unary(UnaryOp::Pow, a, p)).item();
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  MT_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 (or kInfNorm), got ", norm_type);
  MT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return 0.0;

  double total = 0;
  for (const Tensor& g : grads) {
    const double part = partial_norm(g, norm_type);
    total = std::isinf(norm_type) ? ((std::isnan(part) || part > total) ? part : total) : total + part;
  }
  if (!std::isinf(norm_type)) total = norm_type == 2 ? std::sqrt(total) : std::pow(total, 1 / norm_type);

  // PyTorch multiplies by min(coef, 1) unconditionally; multiplying by 1 changes nothing, so skip
  // it. A NaN coefficient (NaN norm) is applied, as in PyTorch: the gradients become NaN.
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1)) {
    for (const Tensor& g : grads) raw::unary_(UnaryOp::MulScalar, g, coef);
  }
  return total;
}

}  // namespace mt::optim
