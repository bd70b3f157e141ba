// cumsum: running sums along one dim, with a node of its own whose backward is the running sum taken
// from the other end. Both directions run the same scan, built from narrow and in-place add, so it
// works on every backend without a kernel of its own.
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

// Note [Cumsum by doubling]: the running sum is taken in ⌈log₂ n⌉ passes (Hillis and Steele): after
// pass k every y[i] holds the sum of the 2ᵏ inputs ending at i (or all of them, near the start), since
// pass k adds y[i - 2ᵏ⁻¹] into y[i]. Each pass is one narrow-and-add over the whole tensor, so the scan
// is n·log₂ n additions instead of n, in log₂ n elementwise launches instead of a kernel per backend.
// The additions are grouped differently from a left-to-right loop (PyTorch's), so float results agree
// to rounding, not bit for bit. `reverse` sums from the end instead: y[i] = Σ_{j >= i} x[j].
Tensor running_sum(const Tensor& x, int dim, bool reverse) {
  Tensor y = raw::clone(x);
  const int64_t n = x.size(dim);
  for (int64_t s = 1; s < n; s *= 2) {
    // reverse: y[i] += y[i + s]; else y[i] += y[i - s]. The addend is copied first: it overlaps y.
    const Tensor addend = raw::clone(raw::narrow(y, dim, reverse ? s : 0, n - s));
    raw::binary_(BinaryOp::Add, raw::narrow(y, dim, reverse ? 0 : s, n - s), addend);
  }
  return y;
}

// y[i] = Σ_{j <= i} x[j]   =>   dx[j] = Σ_{i >= j} dy[i], the running sum from the other end.
struct CumsumBackward final : Node {
  int dim = 0;
  TensorList apply(TensorList&& g) override { return {running_sum(g[0], dim, /*reverse=*/true)}; }
  std::string name() const override { return "CumsumBackward"; }
};

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return clone(x);
  const int d = wrap_dim(dim, x.dim(), "cumsum");
  Tensor y = running_sum(x, d, /*reverse=*/false);  // (Note [Cumsum by doubling])
  if (auto node = record<CumsumBackward>({&x})) {
    node->dim = d;
    set_history(y, node);
  }
  return y;
}

}  // namespace mt
