// gradcheck: analytic gradients (one backward of a random projection of the output) against central
// finite differences of the same projection, element by element, in float64.
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

namespace mt {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  for (size_t i = 0; i < inputs.size(); ++i)
    MT_CHECK(!inputs[i].requires_grad() || inputs[i].dtype() == kFloat64, "gradcheck: input ", i,
             " requires grad but is ", inputs[i].dtype(), "; finite differences need float64");

  // Fresh leaves, so gradients from earlier calls do not leak in.
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = raw::clone(t);
    if (t.requires_grad()) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  const Tensor y0 = f(leaves);
  Generator gen(opts.seed);
  const Tensor w = randn(y0.sizes(), gen, {.dtype = kFloat64});
  // L(x) = Σ w·f(x): a scalar whose gradient is wᵀ·J, one random projection of the Jacobian.
  const auto loss = [&](const std::vector<Tensor>& xs) { return sum(mul(f(xs), w)); };
  loss(leaves).backward();

  GradcheckResult result;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    const Tensor analytic_t = leaves[i].grad();
    const std::vector<double> analytic =
        analytic_t.defined() ? analytic_t.to_vector<double>() : std::vector<double>(leaves[i].numel(), 0.0);
    Tensor x = raw::clone(leaves[i]);  // perturbed copy, contiguous
    double* px = x.data_ptr<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = px[j];
      std::vector<Tensor> xs = leaves;
      NoGradGuard no_grad;
      px[j] = orig + opts.eps;
      xs[i] = x;
      const double plus = loss(xs).item();
      px[j] = orig - opts.eps;
      const double minus = loss(xs).item();
      px[j] = orig;
      const double numeric = (plus - minus) / (2 * opts.eps);
      if (std::abs(numeric - analytic[j]) > opts.atol + opts.rtol * std::abs(numeric)) {
        std::ostringstream os;
        os << "gradcheck: input " << i << " element " << j << ": analytic " << analytic[j]
           << " vs numeric " << numeric;
        return {false, os.str()};
      }
    }
  }
  return result;
}

}  // namespace mt
