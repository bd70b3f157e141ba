// Differentiable index_select and gather. Their backward adds the gradient back at the indexed
// positions (index_add, scatter_add), so repeated indices accumulate. And one_hot, which has no
// gradient (its input is integers).
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

struct IndexBackward final : Node {
  Shape in_shape;
  int64_t dim = 0;
  SavedTensor index;
  bool gather = false;
  // y = x.index_select(dim, i)  =>  dx = zeros(x.shape).index_add(dim, i, dy)
  // y = x.gather(dim, i)        =>  dx = zeros(x.shape).scatter_add(dim, i, dy)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor i = index.unpack(*this);
    return {gather ? raw::scatter_add_zeros(in_shape, dim, i, g[0]) : raw::index_add_zeros(in_shape, dim, i, g[0])};
  }
  void release_saved() override { index.reset(), Node::release_saved(); }
  std::string name() const override { return gather ? "GatherBackward" : "IndexSelectBackward"; }
};

Tensor indexed(const Tensor& x, int64_t dim, const Tensor& index, bool gather) {
  Tensor y = gather ? raw::gather(x, dim, index) : raw::index_select(x, dim, index);
  if (auto node = record<IndexBackward>({&x})) {
    node->in_shape = x.sizes(), node->dim = dim, node->index = SavedTensor(index), node->gather = gather;
    set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) { return indexed(x, dim, index, false); }
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return indexed(x, dim, index, true); }

// out[..., c] = [indices[...] == c], compared against arange(num_classes) broadcast along a new last dim.
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  MT_CHECK(indices.dtype() == kInt64, "one_hot: indices must be int64 class indices, got ", indices.dtype());
  MT_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (from the data) or >= 0, got ", num_classes);
  if (indices.numel() > 0) {
    // Reductions read the values on any device; one copy of two numbers to the host.
    const int64_t lo = raw::min(indices).item<int64_t>(), hi = raw::max(indices).item<int64_t>();
    MT_CHECK(lo >= 0, "one_hot: class indices must be >= 0, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    MT_CHECK(hi < num_classes, "one_hot: class index ", hi, " is out of range for num_classes = ", num_classes);
  } else {
    MT_CHECK(num_classes != -1, "one_hot: cannot infer num_classes from empty indices; pass it");
  }
  const Tensor classes = arange(num_classes, {.dtype = kInt64, .device = indices.device()});
  return raw::binary(BinaryOp::Eq, raw::unsqueeze(indices, indices.dim()), classes);
}

}  // namespace mt
