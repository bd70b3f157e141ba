// Differentiable index_select and gather. Their backward adds the gradient back at the indexed
// positions (index_add, scatter_add), so repeated indices accumulate.
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

}  // namespace mt
