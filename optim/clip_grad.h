// clip_grad_norm_: rescales gradients in place so that their joint norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_ does. Called between backward and step:
//
//   loss.backward();
//   double norm = optim::clip_grad_norm_(model.parameters(), 1.0);
//   opt.step();
//
// What it does: any p-norm (p > 0) or the infinity norm (norm_type = kInfNorm), over all gradients
// together as if they were one vector; parameters without a gradient are skipped.
// What it does not do: error_if_nonfinite (a NaN or infinite norm is returned, and the gradients are
// scaled by it, like PyTorch's default), foreach kernels, or clip_grad_value_.
#pragma once

#include <limits>
#include <vector>

#include "tensor/tensor.h"

namespace mt::optim {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// total = (Σ over every gradient element |g|^p)^(1/p)   (max |g| for the infinity norm)
// coef  = max_norm / (total + 1e-6);  if coef < 1, every gradient is multiplied by coef.
// Returns total, the norm before clipping (0 when no parameter has a gradient).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace mt::optim
