// Raw ops: joining tensors. cat writes each input into its narrow() window of one fresh output
// through Backend::copy, so it needs no kernel of its own; split/chunk need none at all (they are
// narrow views, autograd/functions/join.cpp).
#include "tensor/raw_ops.h"

namespace mt::raw {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "cat: needs at least one tensor");
  const Tensor& first = tensors[0];
  MT_CHECK(first.dim() > 0, "cat: zero-dimensional tensor 0 cannot be concatenated");
  const int d = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.sizes();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MT_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), "cat: tensor ", i, " is ", t.dtype(),
             " on ", t.device(), ", tensor 0 is ", first.dtype(), " on ", first.device());
    bool fits = t.dim() == first.dim();
    for (int j = 0; fits && j < t.dim(); ++j) fits = j == d || t.size(j) == first.size(j);
    MT_CHECK(fits, "cat: tensor ", i, " of shape ", t.sizes(), " does not match tensor 0 of shape ",
             first.sizes(), " in every dim but ", d);
    shape[d] += t.size(d);
  }
  Tensor out = empty(shape, {.dtype = first.dtype(), .device = first.device()});
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) backend(out.device()).copy(narrow(out, d, offset, t.size(d)), t);
    offset += t.size(d);
  }
  return out;
}

}  // namespace mt::raw
