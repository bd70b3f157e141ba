// Raw ops: joining tensors. cat writes each input into its narrow() window of one fresh output
// through Backend::copy, so it needs no kernel of its own; split/chunk need none at all (they are
// narrow views, autograd/functions/join.cpp).
#include "tensor/raw_ops.h"

namespace mt::raw {

// Note [Cat skips 1-D empties]: a tensor of shape (0) joins tensors of any rank and adds nothing,
// so an empty accumulator, zeros({0}), can start a list that cat(parts, 1) joins. PyTorch keeps this
// legacy rule (1.13 and since); without it the empty piece would fix the rank at 1. The rank, the
// other dims and the meaning of a negative dim come from the first tensor not skipped
// (cat_reference); a skipped tensor must still have the same dtype and device, and its gradient is
// an empty (0) tensor (CatBackward, autograd/functions/join.cpp).
const Tensor& cat_reference(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (!cat_skips(t)) return t;
  return tensors[0];
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "cat: needs at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i)
    MT_CHECK(tensors[i].dim() > 0, "cat: zero-dimensional tensor ", i, " cannot be concatenated");
  const Tensor& ref = cat_reference(tensors);
  const int d = wrap_dim(dim, ref.dim(), "cat");
  Shape shape = ref.sizes();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MT_CHECK(t.dtype() == ref.dtype() && t.device() == ref.device(), "cat: tensor ", i, " is ", t.dtype(), " on ",
             t.device(), ", the others ", ref.dtype(), " on ", ref.device());
    if (cat_skips(t) && &t != &ref) continue;
    bool fits = t.dim() == ref.dim();
    for (int j = 0; fits && j < t.dim(); ++j) fits = j == d || t.size(j) == ref.size(j);
    MT_CHECK(fits, "cat: tensor ", i, " of shape ", t.sizes(), " does not match shape ", ref.sizes(),
             " in every dim but ", d);
    shape[d] += t.size(d);
  }
  Tensor out = empty(shape, {.dtype = ref.dtype(), .device = ref.device()});
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (cat_skips(t) && &t != &ref) continue;
    if (t.numel() > 0) backend(out.device()).copy(narrow(out, d, offset, t.size(d)), t);
    offset += t.size(d);
  }
  return out;
}

}  // namespace mt::raw
