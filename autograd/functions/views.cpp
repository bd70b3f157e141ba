// Differentiable views and copies. A view's backward maps the gradient back to the input's shape:
// reshape it, transpose it back, or place it into zeros at the viewed positions.
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

// Backward of views that keep every element exactly once: view, reshape, squeeze, unsqueeze,
// flatten, contiguous, clone.   dx = reshape(dy, x.shape)
struct ReshapeBackward final : Node {
  Shape in_shape;
  std::string op;
  TensorList apply(TensorList&& g) override { return {raw::reshape(g[0], in_shape)}; }
  std::string name() const override { return op + "Backward"; }
};

// y = permute(x, order)   =>   dx = permute(dy, inverse(order)); transpose is a permutation too.
struct PermuteBackward final : Node {
  Shape inverse;
  TensorList apply(TensorList&& g) override { return {raw::permute(g[0], inverse)}; }
  std::string name() const override { return "PermuteBackward"; }
};

// y = x[slice along dim]   =>   dx = zeros(x.shape) with dy written at the slice
struct SliceBackward final : Node {
  Shape in_shape;
  DType dtype = kFloat32;
  int64_t dim = 0, start = 0, end = 0, step = 1;
  TensorList apply(TensorList&& g) override {
    Tensor dx = zeros(in_shape, {.dtype = dtype, .device = g[0].device()});
    raw::copy_(raw::slice(dx, dim, start, end, step), g[0]);
    return {dx};
  }
  std::string name() const override { return "SliceBackward"; }
};

// y = expand(x, shape)   =>   dx = sum of dy over the broadcast dims
struct ExpandBackward final : Node {
  Shape in_shape;
  TensorList apply(TensorList&& g) override { return {raw::sum_to(g[0], in_shape)}; }
  std::string name() const override { return "ExpandBackward"; }
};

// y = cast(x, dtype)   =>   dx = cast(dy, x.dtype)
struct CastBackward final : Node {
  DType in_dtype = kFloat32;
  TensorList apply(TensorList&& g) override { return {raw::cast(g[0], in_dtype)}; }
  std::string name() const override { return "CastBackward"; }
};

Tensor reshaped(const Tensor& x, Tensor y, const char* op) {
  if (auto node = record<ReshapeBackward>({&x})) {
    node->in_shape = x.sizes(), node->op = op;
    set_history(y, node);
  }
  return y;
}

Tensor permuted(const Tensor& x, Tensor y, const Shape& order) {
  if (auto node = record<PermuteBackward>({&x})) {
    node->inverse.resize(order.size());
    for (int i = 0; i < order.size(); ++i) node->inverse[wrap_dim(order[i], x.dim(), "permute")] = i;
    set_history(y, node);
  }
  return y;
}

Tensor sliced(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor y = raw::slice(x, dim, start, end, step);
  if (auto node = record<SliceBackward>({&x})) {
    node->in_shape = x.sizes(), node->dtype = x.dtype();
    node->dim = dim, node->start = start, node->end = end, node->step = step;
    set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) { return reshaped(x, raw::view(x, shape), "View"); }
Tensor reshape(const Tensor& x, const Shape& shape) { return reshaped(x, raw::reshape(x, shape), "Reshape"); }
Tensor squeeze(const Tensor& x) { return reshaped(x, raw::squeeze(x), "Squeeze"); }
Tensor squeeze(const Tensor& x, int64_t dim) { return reshaped(x, raw::squeeze(x, dim), "Squeeze"); }
Tensor unsqueeze(const Tensor& x, int64_t dim) { return reshaped(x, raw::unsqueeze(x, dim), "Unsqueeze"); }
Tensor flatten(const Tensor& x, int64_t s, int64_t e) { return reshaped(x, raw::flatten(x, s, e), "Flatten"); }
Tensor clone(const Tensor& x) { return reshaped(x, raw::clone(x), "Clone"); }

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return reshaped(x, raw::contiguous(x), "Contiguous");
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  Shape order;
  for (int i = 0; i < x.dim(); ++i) order.push_back(i);
  if (x.dim() > 0) std::swap(order[wrap_dim(d0, x.dim(), "transpose")], order[wrap_dim(d1, x.dim(), "transpose")]);
  return permuted(x, raw::transpose(x, d0, d1), order);
}

Tensor permute(const Tensor& x, const Shape& order) { return permuted(x, raw::permute(x, order), order); }

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  raw::narrow(x, dim, start, length);  // checks the range with narrow's own message
  const int64_t n = x.size(dim);
  if (start < 0) start += n;
  return sliced(x, dim, start, start + length, 1);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return sliced(x, dim, start, end, step);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Tensor y = raw::expand(x, shape);
  if (auto node = record<ExpandBackward>({&x})) {
    node->in_shape = x.sizes();
    set_history(y, node);
  }
  return y;
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = raw::cast(x, dtype);
  if (is_floating(dtype) && is_floating(x.dtype())) {
    if (auto node = record<CastBackward>({&x})) {
      node->in_dtype = x.dtype();
      set_history(y, node);
    }
  }
  return y;
}

}  // namespace mt
