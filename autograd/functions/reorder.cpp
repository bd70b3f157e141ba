// flip and roll: copies that reorder the elements along some dims. Both are compositions of
// differentiable ops (index_select with a reversed arange; narrow and cat), so their backward is
// theirs: flip's gradient is flipped back, roll's is rolled back.
#include "autograd/ops.h"
#include "tensor/raw_ops.h"

namespace mt {

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor y = x;
  std::vector<bool> seen(x.dim(), false);
  for (int64_t dim : dims) {
    const int d = wrap_dim(dim, x.dim(), "flip");
    MT_CHECK(!seen[d], "flip: dim ", d, " appears more than once in dims");
    seen[d] = true;
    const int64_t n = x.size(d);
    // index = n-1, n-2, ..., 0
    const Tensor index = raw::unary(UnaryOp::AddScalar, raw::unary(UnaryOp::Neg, arange(n, {.dtype = kInt64,
                                    .device = x.device()})), static_cast<double>(n - 1));
    y = index_select(y, d, index);
  }
  return dims.empty() ? clone(x) : y;  // a copy even with no dims, as torch.flip
}

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  if (dims.empty()) {
    MT_CHECK(shifts.size() == 1, "roll: without dims, give one shift (for the flattened tensor), got ",
             shifts.size());
    return reshape(roll(flatten(x), shifts, {0}), x.sizes());
  }
  MT_CHECK(shifts.size() == dims.size(), "roll: shifts and dims must have the same length, got ", shifts.size(),
           " shifts and ", dims.size(), " dims");
  Tensor y = x;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int d = wrap_dim(dims[k], x.dim(), "roll");
    const int64_t n = x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;  // in [0, n): a negative shift rolls the other way
    if (s == 0) continue;
    // y[i] = x[(i - s) mod n]: the last s elements come first.
    y = cat({narrow(y, d, n - s, s), narrow(y, d, 0, n - s)}, d);
  }
  return y.is_same(x) ? clone(x) : y;  // a copy even when nothing moved, as torch.roll
}

}  // namespace mt
