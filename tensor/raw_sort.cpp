// Raw ops, sorting: argsort along any dim. The dim is moved last and made contiguous, so a backend
// sorts the rows of one (rows, n) layout (Backend::argsort); the indices are moved back after,
// contiguous as PyTorch returns them.
// sort, topk and argsort with their gradients are in autograd/functions/sort.cpp.
#include "tensor/raw_ops.h"

namespace mt::raw {

Tensor argsort(const Tensor& x, int64_t dim, bool descending, int64_t k) {
  if (x.dim() == 0) return zeros(Shape{}, {.dtype = kInt64, .device = x.device()});
  const int d = wrap_dim(dim, x.dim(), "argsort");
  const int last = static_cast<int>(x.dim()) - 1;
  // x with dim d swapped to the end, as (rows, n) rows.
  const Tensor moved = contiguous(transpose(x, d, last));
  const int64_t n = x.size(d), rows = n == 0 ? 0 : moved.numel() / n;
  if (k < 0) k = n;
  MT_CHECK(k <= n, "argsort: k (", k, ") must be at most the size of dim ", d, " of ", x.sizes());
  Shape shape = moved.sizes();
  shape[last] = k;
  Tensor indices = empty(shape, {.dtype = kInt64, .device = x.device()});
  if (indices.numel() > 0)
    backend(x.device()).argsort(reshape(indices, Shape{rows, k}), reshape(moved, Shape{rows, n}), descending);
  return contiguous(transpose(indices, d, last));
}

}  // namespace mt::raw
