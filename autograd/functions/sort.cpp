// sort, argsort and topk: the order comes from the raw argsort (tensor/raw_sort.cpp; int64, not
// differentiable), and the values are gather(x, dim, indices), so their gradient is gather's:
// scattered back to the positions the values came from. No node of their own.
#include "autograd/ops.h"
#include "tensor/raw_ops.h"

namespace mt {

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  if (x.dim() == 0) return {clone(x), raw::argsort(x, dim, descending)};
  const Tensor indices = raw::argsort(x, dim, descending);
  return {gather(x, dim, indices), indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return raw::argsort(x, dim, descending); }

// The first k of the stable sort (ties in input order, the k sorted), without ordering the rest.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  MT_CHECK(k >= 0 && k <= n, "topk: k (", k, ") must be in [0, ", n, "], the size of dim ", dim, " of ", x.sizes());
  if (x.dim() == 0) return {clone(x), raw::argsort(x, dim, largest)};
  const Tensor indices = raw::argsort(x, dim, largest, k);
  return {gather(x, dim, indices), indices};
}

}  // namespace mt
