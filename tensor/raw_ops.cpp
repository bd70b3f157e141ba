// Raw ops, part 1: copies, elementwise ops with broadcasting and dtype promotion, reductions.
// Each function checks, allocates the result and hands the work to the device's Backend.
#include "tensor/raw_ops.h"

#include <algorithm>
#include <limits>

#include "tensor/detail/borrowed_view.h"

namespace mt::raw {

namespace {

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.device() == b.device(), op, ": tensors are on different devices (", a.device(), " and ",
           b.device(), "); move one with .to(device)");
}

// An operand of an elementwise op: a cast to dtype (a itself when it has it) and broadcast to shape
// through a borrowed view, for the one backend call (Note [Borrowed views]). A broadcast operand is
// common (a bias, a 0-dim scale), and a heap view for it would be a third of a tiny op's cost.
class Fitted {
 public:
  Fitted(const Tensor& a, const Shape& shape, DType dtype)
      : cast_(a.dtype() == dtype ? Tensor() : cast(a, dtype)), operand_(cast_.defined() ? cast_ : a, shape) {}
  operator const Tensor&() const { return operand_; }

 private:
  Tensor cast_;  // undefined when a has the dtype
  detail::BroadcastOperand operand_;
};

}  // namespace

// ---- copies and fills -------------------------------------------------------------------------

Tensor clone(const Tensor& t) {
  Tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
  backend(t.device()).copy(out, t);
  return out;
}

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), {.dtype = dtype, .device = t.device()});
  backend(t.device()).copy(out, t);
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = device});
  // The non-CPU side's backend knows how to move bytes across.
  backend(device.is_cpu() ? t.device() : device).copy(out, t);
  return out;
}

void copy_(const Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "copy_");
  const Shape shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  MT_CHECK(shape == dst.sizes(), "copy_: source of shape ", src.sizes(), " does not broadcast to ", dst.sizes());
  backend(dst.device()).copy(dst, src.sizes() == shape ? src : expand(src, shape));
  dst.storage()->bump_version();
}

void fill_(const Tensor& dst, double value) {
  backend(dst.device()).fill(dst, value);
  dst.storage()->bump_version();
}

// ---- elementwise ------------------------------------------------------------------------------

Tensor unary(UnaryOp op, const Tensor& x, double scalar) {
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  backend(x.device()).unary(op, out, x, scalar);
  return out;
}

void unary_(UnaryOp op, const Tensor& a, double scalar) {
  backend(a.device()).unary(op, a, a, scalar);
  a.storage()->bump_version();
}

void unary_into(UnaryOp op, const Tensor& dst, const Tensor& src, double scalar) {
  check_same_device(dst, src, "unary_into");
  MT_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "unary_into: destination ", dst.sizes(), " ",
           dst.dtype(), ", source ", src.sizes(), " ", src.dtype(), "; they must match");
  backend(dst.device()).unary(op, dst, src, scalar);
  dst.storage()->bump_version();
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_device(a, b, op_name(op));
  // The common case (same shape and dtype) skips broadcasting and promotion entirely.
  if (a.sizes() == b.sizes() && a.dtype() == b.dtype()) {
    Tensor out = empty(a.sizes(), {.dtype = a.dtype(), .device = a.device()});
    backend(a.device()).binary(op, out, a, b);
    return out;
  }
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op_name(op));
  const DType dtype = promote(a.dtype(), b.dtype());
  Tensor out = empty(shape, {.dtype = dtype, .device = a.device()});
  backend(a.device()).binary(op, out, Fitted(a, shape, dtype), Fitted(b, shape, dtype));
  return out;
}

void binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_device(a, b, op_name(op));
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op_name(op));
  MT_CHECK(shape == a.sizes(), op_name(op), "_ (in place): the result shape ", shape,
           " would differ from the destination's shape ", a.sizes());
  // A wider b (bfloat16 a += float32 b): computed in the promoted dtype and rounded into a once, as
  // PyTorch does, not with b rounded to a's dtype first.
  if (is_floating(a.dtype()) && promote(a.dtype(), b.dtype()) != a.dtype())
    backend(a.device()).copy(a, binary(op, a, b));
  else
    backend(a.device()).binary(op, a, a, Fitted(b, shape, a.dtype()));
  a.storage()->bump_version();
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device(cond, a, "where");
  check_same_device(a, b, "where");
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  const DType dtype = promote(a.dtype(), b.dtype());
  Tensor out = empty(shape, {.dtype = dtype, .device = a.device()});
  backend(a.device()).where(out, Fitted(cond, shape, cond.dtype()), Fitted(a, shape, dtype), Fitted(b, shape, dtype));
  return out;
}

// ---- reductions -------------------------------------------------------------------------------

namespace {
uint32_t dim_mask(const Tensor& x, const std::vector<int64_t>& dims, const char* name) {
  if (dims.empty()) return x.dim() == 0 ? 0u : (1u << x.dim()) - 1;
  uint32_t mask = 0;
  for (int64_t d : dims) {
    const int w = wrap_dim(d, x.dim(), name);
    MT_CHECK(!(mask & (1u << w)), name, ": dim ", d, " appears twice");
    if (x.dim() > 0) mask |= 1u << w;
  }
  return mask;
}
}  // namespace

Tensor reduce(ReductionOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const char* name) {
  const uint32_t mask = dim_mask(x, dims, name);
  Shape kept, dropped;  // result shape with and without the reduced dims
  for (int i = 0; i < x.dim(); ++i) {
    const bool reduced = mask & (1u << i);
    if (reduced && op != ReductionOp::Sum)
      MT_CHECK(x.sizes()[i] > 0, name, ": cannot reduce over the empty dim ", i, " of shape ", x.sizes());
    kept.push_back(reduced ? 1 : x.sizes()[i]);
    if (!reduced) dropped.push_back(x.sizes()[i]);
  }
  if (x.dim() == 0 && op != ReductionOp::Sum) MT_CHECK(x.numel() == 1, name, ": empty input");
  const DType out_dtype = op == ReductionOp::ArgMax ? kInt64 : x.dtype();
  Tensor out = empty(keepdim ? kept : dropped, {.dtype = out_dtype, .device = x.device()});
  if (x.dim() == 0) {
    // Nothing to reduce: sum/max of a scalar is the scalar; its argmax is 0.
    if (op == ReductionOp::ArgMax) backend(x.device()).fill(out, 0);
    else backend(x.device()).copy(out, x);
    return out;
  }
  // The backend writes the kept shape; without keepdim that is a borrowed view of out (Note
  // [Borrowed views]), the same contiguous bytes, since dims of size 1 move no element.
  if (keepdim) backend(x.device()).reduce(op, out, x, mask);
  else backend(x.device()).reduce(op, detail::BorrowedView(out, kept, contiguous_strides(kept), 0), x, mask);
  return out;
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReductionOp::Sum, x, dims, keepdim, "sum");
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  MT_CHECK(is_floating(x.dtype()), "mean: needs a floating dtype, got ", x.dtype());
  Tensor s = sum(x, dims, keepdim);
  const int64_t count = x.numel() / std::max<int64_t>(s.numel(), 1);
  // bfloat16 and float16 divide by the count, as PyTorch does: 1/count rounded to 16 bits would
  // cost a rounding more than count itself (exact up to 256 in bfloat16, 2048 in float16).
  if (is_low_precision(x.dtype()) && count > 0)
    binary_(BinaryOp::Div, s, full(Shape{}, static_cast<double>(count), {.dtype = x.dtype(), .device = x.device()}));
  else
    unary_(UnaryOp::MulScalar, s,
           count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(count));
  return s;
}

Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReductionOp::Max, x, dims, keepdim, "max");
}

Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReductionOp::Min, x, dims, keepdim, "min");
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce(ReductionOp::ArgMax, x, {dim}, keepdim, "argmax");
}

// The smallest is the largest of the order-reversed values, with the same ties and NaNs in the same
// places: -x is exact for floats; integers take -1 - x, which (unlike -x) no int64 overflows.
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  const Tensor reversed = is_floating(x.dtype()) ? unary(UnaryOp::Neg, x)
                        : binary(BinaryOp::Sub, full(Shape{}, -1.0, {.dtype = x.dtype(), .device = x.device()}), x);
  return argmax(reversed, dim, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  MT_CHECK(x.dim() >= shape.size(), "sum_to: cannot sum ", x.sizes(), " down to ", shape);
  const int lead = x.dim() - shape.size();
  std::vector<int64_t> dims;
  for (int i = 0; i < x.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && x.sizes()[i] != 1) dims.push_back(i);
    else MT_CHECK(shape[i - lead] == x.sizes()[i], "sum_to: cannot sum ", x.sizes(), " down to ", shape);
  }
  if (dims.empty()) return view(x, shape);
  return view(sum(x, dims, /*keepdim=*/true), shape);
}

}  // namespace mt::raw
