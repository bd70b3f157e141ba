// flip, roll and repeat: copies that reorder or tile the elements along some dims. All are
// compositions of differentiable ops (index_select with a reversed arange; narrow and cat; expand and
// reshape), so their backward is theirs: flip's gradient is flipped back, roll's is rolled back,
// repeat's is summed over the copies (expand's backward).
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

// x: (s0, s1, ...) padded with leading 1s to repeats' length, viewed as (1, s0, 1, s1, ...), expanded
// to (r0, s0, r1, s1, ...) (no copy) and reshaped to (r0·s0, r1·s1, ...) (the one copy).
Tensor repeat(const Tensor& x, const Shape& repeats) {
  MT_CHECK(repeats.size() >= x.dim(), "repeat: repeats ", repeats, " must have at least as many dims as the input ",
           x.sizes());
  MT_CHECK(2 * repeats.size() <= kMaxDims, "repeat: ", repeats.size(), " dims need ", 2 * repeats.size(),
           " while tiling; tensors have at most ", kMaxDims);
  Shape interleaved, expanded, result;
  const int lead = repeats.size() - static_cast<int>(x.dim());
  for (int d = 0; d < repeats.size(); ++d) {
    MT_CHECK(repeats[d] >= 0, "repeat: repeats ", repeats, " must be non-negative");
    const int64_t s = d < lead ? 1 : x.size(d - lead);
    interleaved.push_back(1), interleaved.push_back(s);
    expanded.push_back(repeats[d]), expanded.push_back(s);
    result.push_back(repeats[d] * s);
  }
  return reshape(expand(reshape(x, interleaved), expanded), result);
}

}  // namespace mt
