// raw::cumsum: running sums along one dim, on the backend's cumsum (one pass on the CPU), and the
// composed default a backend without a scan kernel of its own runs (the CUDA one).
#include "tensor/raw_ops.h"

namespace mt {

// Note [Cumsum by doubling]: the running sum is taken in ⌈log₂ n⌉ passes (Hillis and Steele): after
// pass k every y[i] holds the sum of the 2ᵏ inputs ending at i (or all of them, near the start), since
// pass k adds y[i - 2ᵏ⁻¹] into y[i]. Each pass is one narrow-and-add over the whole tensor, so the scan
// is n·log₂ n additions instead of n, in log₂ n elementwise launches instead of a kernel per backend.
// The additions are grouped differently from a left-to-right loop (PyTorch's, and the CPU kernel's),
// so float results agree to rounding, not bit for bit. `reverse` sums from the end instead.
void Backend::cumsum(const Tensor& out, const Tensor& in, bool reverse) {
  copy(out, in);
  const int64_t n = in.size(1);
  for (int64_t s = 1; s < n; s *= 2) {
    // reverse: y[i] += y[i + s]; else y[i] += y[i - s]. The addend is copied first: it overlaps y.
    const Tensor addend = raw::clone(raw::narrow(out, 1, reverse ? s : 0, n - s));
    raw::binary_(BinaryOp::Add, raw::narrow(out, 1, reverse ? 0 : s, n - s), addend);
  }
}

namespace raw {

Tensor cumsum(const Tensor& x, int64_t dim, bool reverse) {
  const int d = wrap_dim(dim, x.dim(), "cumsum");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.size(i);
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  const Tensor in = contiguous(x);
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  backend(x.device()).cumsum(view(out, {outer, x.size(d), inner}), view(in, {outer, x.size(d), inner}), reverse);
  return out;
}

}  // namespace raw
}  // namespace mt
