// Differentiable reductions: sum, mean, max. Their backward spreads the output gradient back over
// the reduced dims (a broadcast), scaled for mean, masked to the maxima for max.
#include <algorithm>

#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

// The output gradient with the reduced dims put back as size 1, so it broadcasts against x.
Tensor unsqueeze_reduced(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim || in_shape.size() == 0) return g;
  if (dims.empty()) {
    Shape ones;
    ones.resize(in_shape.size(), 1);
    return raw::view(g, ones);
  }
  std::vector<int> sorted;
  for (int64_t d : dims) sorted.push_back(wrap_dim(d, in_shape.size(), "sum"));
  std::sort(sorted.begin(), sorted.end());
  Tensor r = g;
  for (int d : sorted) r = raw::unsqueeze(r, d);
  return r;
}

struct SumBackward final : Node {
  Shape in_shape;
  std::vector<int64_t> dims;
  bool keepdim = false;
  double scale = 1.0;  // 1/count for mean
  // y = Σ_dims x   =>   dx = broadcast(dy) (times 1/count for mean)
  TensorList apply(TensorList&& g) override {
    Tensor dx = raw::expand(unsqueeze_reduced(g[0], in_shape, dims, keepdim), in_shape);
    if (scale != 1.0) dx = raw::unary(UnaryOp::MulScalar, dx, scale);
    return {dx};
  }
  std::string name() const override { return scale == 1.0 ? "SumBackward" : "MeanBackward"; }
};

struct MaxBackward final : Node {
  SavedTensor x, y;  // y with keepdim
  std::vector<int64_t> dims;
  bool keepdim = false;
  // y = max_dims x   =>   dx = dy·[x = y] / (number of maxima), so ties share the gradient evenly
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor xv = x.unpack(*this), yv = y.unpack(*this);
    const Tensor mask = raw::binary(BinaryOp::Eq, xv, yv);
    const Tensor count = raw::sum(mask, dims, /*keepdim=*/true);
    const Tensor share = raw::binary(BinaryOp::Div, mask, count);
    return {raw::binary(BinaryOp::Mul, unsqueeze_reduced(g[0], xv.sizes(), dims, keepdim), share)};
  }
  void release_saved() override { x.reset(), y.reset(), Node::release_saved(); }
  std::string name() const override { return "MaxBackward"; }
};

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = raw::sum(x, dims, keepdim);
  if (auto node = record<SumBackward>({&x})) {
    node->in_shape = x.sizes(), node->dims = dims, node->keepdim = keepdim;
    set_history(y, node);
  }
  return y;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = raw::mean(x, dims, keepdim);
  if (auto node = record<SumBackward>({&x})) {
    node->in_shape = x.sizes(), node->dims = dims, node->keepdim = keepdim;
    node->scale = static_cast<double>(y.numel()) / static_cast<double>(std::max<int64_t>(x.numel(), 1));
    set_history(y, node);
  }
  return y;
}

Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y_keep = raw::max(x, dims, /*keepdim=*/true);
  Tensor y = y_keep;
  if (!keepdim) {
    Shape dropped;  // y_keep's shape without the reduced dims
    for (int i = 0; i < x.dim(); ++i)
      if (!(dims.empty() || std::count_if(dims.begin(), dims.end(), [&](int64_t d) { return wrap_dim(d, x.dim(), "max") == i; })))
        dropped.push_back(x.sizes()[i]);
    y = raw::view(y_keep, dropped);
  }
  if (auto node = record<MaxBackward>({&x})) {
    node->x = SavedTensor(x), node->y = SavedTensor(y_keep), node->dims = dims, node->keepdim = keepdim;
    set_history(y, node);
  }
  return y;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return raw::argmax(x, dim, keepdim); }

}  // namespace mt
