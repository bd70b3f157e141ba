// Differentiable elementwise ops. Each backward is the chain rule for its op, written with raw ops;
// broadcasting and dtype promotion in the forward are undone by reduce_grad (sum back down to the
// input's shape, cast back to its dtype).
#include <cmath>
#include <numbers>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::InputInfo;
using detail::record;
using detail::reduce_grad;
using detail::set_history;

namespace {

Tensor mul_raw(const Tensor& a, const Tensor& b) { return raw::binary(BinaryOp::Mul, a, b); }
Tensor scale(const Tensor& a, double s) { return raw::unary(UnaryOp::MulScalar, a, s); }

// Note [Masked gradients]: an op whose derivative is 0 on part of its domain (relu below 0, the
// losing side of maximum/minimum, clamp outside its range, max's non-maxima) passes no gradient
// there, whatever arrives. Writing that as dy·mask would turn an infinite dy into inf·0 = NaN: in
// sqrt(relu(x)) at x <= 0, sqrt's backward sends dy/(2·0) = inf into relu's. PyTorch selects
// instead (threshold_backward, where), which gives 0, so these backwards select too.
// dy·share where share != 0, else 0.
Tensor masked_mul(const Tensor& dy, const Tensor& share) {
  const Tensor zero = zeros(Shape{}, {.dtype = dy.dtype(), .device = dy.device()});
  return raw::where(raw::binary(BinaryOp::Ne, share, zero), mul_raw(dy, share), zero);
}

// ---- binary -------------------------------------------------------------------------------------

struct AddBackward final : Node {
  InputInfo a, b;
  double alpha = 1.0;  // y = a + alpha·b (alpha = -1 for sub)
  // y = a + alpha·b   =>   da = dy,  db = alpha·dy
  TensorList apply(TensorList&& g) override {
    Tensor da, db;
    if (next_edges[0].valid()) da = reduce_grad(g[0], a);
    if (next_edges[1].valid()) db = reduce_grad(alpha == 1.0 ? g[0] : scale(g[0], alpha), b);
    return {da, db};
  }
  std::string name() const override { return alpha == 1.0 ? "AddBackward" : "SubBackward"; }
};

struct MulBackward final : Node {
  SavedTensor a, b;
  InputInfo ia, ib;
  // y = a·b   =>   da = dy·b,  db = dy·a
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const bool need_a = next_edges[0].valid(), need_b = next_edges[1].valid();
    return {need_a ? reduce_grad(mul_raw(g[0], b.unpack(*this)), ia) : Tensor(),
            need_b ? reduce_grad(mul_raw(g[0], a.unpack(*this)), ib) : Tensor()};
  }
  void release_saved() override { a.reset(), b.reset(), Node::release_saved(); }
  std::string name() const override { return "MulBackward"; }
};

struct DivBackward final : Node {
  SavedTensor a, b;
  InputInfo ia, ib;
  // y = a/b   =>   da = dy/b,  db = -dy·a/b²
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor bv = b.unpack(*this);
    Tensor da, db;
    if (next_edges[0].valid()) da = reduce_grad(raw::binary(BinaryOp::Div, g[0], bv), ia);
    if (next_edges[1].valid()) {
      const Tensor q = raw::binary(BinaryOp::Div, a.unpack(*this), mul_raw(bv, bv));
      db = reduce_grad(raw::unary(UnaryOp::Neg, mul_raw(g[0], q)), ib);
    }
    return {da, db};
  }
  void release_saved() override { a.reset(), b.reset(), Node::release_saved(); }
  std::string name() const override { return "DivBackward"; }
};

struct MaxMinBackward final : Node {
  SavedTensor a, b;
  InputInfo ia, ib;
  bool is_max = true;
  // y = max(a, b)   =>   da = dy·[a > b] + dy/2·[a = b],  db likewise (ties split evenly, like PyTorch)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor av = a.unpack(*this), bv = b.unpack(*this);
    const Tensor wins_a = raw::binary(is_max ? BinaryOp::Gt : BinaryOp::Lt, av, bv);
    const Tensor tie = scale(raw::binary(BinaryOp::Eq, av, bv), 0.5);
    const Tensor share_a = raw::binary(BinaryOp::Add, wins_a, tie);
    const Tensor share_b = raw::unary(UnaryOp::AddScalar, raw::unary(UnaryOp::Neg, share_a), 1.0);
    return {reduce_grad(masked_mul(g[0], share_a), ia), reduce_grad(masked_mul(g[0], share_b), ib)};
  }
  void release_saved() override { a.reset(), b.reset(), Node::release_saved(); }
  std::string name() const override { return is_max ? "MaximumBackward" : "MinimumBackward"; }
};

struct WhereBackward final : Node {
  SavedTensor cond;
  InputInfo ia, ib;
  // y = cond ? a : b   =>   da = cond ? dy : 0,  db = cond ? 0 : dy
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor c = cond.unpack(*this);
    const Tensor zero = zeros(Shape{}, {.dtype = g[0].dtype(), .device = g[0].device()});
    Tensor da, db;  // only the sides that want one: masked_fill's number side does not
    if (next_edges[0].valid()) da = reduce_grad(raw::where(c, g[0], zero), ia);
    if (next_edges[1].valid()) db = reduce_grad(raw::where(c, zero, g[0]), ib);
    return {da, db};
  }
  void release_saved() override { cond.reset(), Node::release_saved(); }
  std::string name() const override { return "WhereBackward"; }
};

Tensor add_scaled(const Tensor& a, const Tensor& b, double alpha) {
  Tensor y = raw::binary(alpha == 1.0 ? BinaryOp::Add : BinaryOp::Sub, a, b);
  if (auto node = record<AddBackward>({&a, &b})) {
    node->a = InputInfo(a), node->b = InputInfo(b), node->alpha = alpha;
    set_history(y, node);
  }
  return y;
}

Tensor max_min(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor y = raw::binary(is_max ? BinaryOp::Maximum : BinaryOp::Minimum, a, b);
  if (auto node = record<MaxMinBackward>({&a, &b})) {
    node->a = SavedTensor(a), node->b = SavedTensor(b), node->ia = InputInfo(a), node->ib = InputInfo(b);
    node->is_max = is_max;
    set_history(y, node);
  }
  return y;
}

// ---- unary --------------------------------------------------------------------------------------

// One node type for the unary ops; `op` picks the derivative. Saves x or y, whichever the
// derivative is cheaper in (exp, tanh, sigmoid, sqrt: y; the rest: x).
struct UnaryBackward final : Node {
  UnaryOp op;
  double scalar = 0.0;
  SavedTensor saved;
  explicit UnaryBackward(UnaryOp o, double s) : op(o), scalar(s) {}

  static bool saves_output(UnaryOp op) {
    return op == UnaryOp::Exp || op == UnaryOp::Tanh || op == UnaryOp::Sigmoid || op == UnaryOp::Sqrt ||
           op == UnaryOp::Relu || op == UnaryOp::Expm1;
  }

  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor& dy = g[0];
    const Tensor v = saved.unpack(*this);  // x or y, see saves_output
    using U = UnaryOp;
    switch (op) {
      case U::Neg: return {raw::unary(U::Neg, dy)};                     // y = -x       => dx = -dy
      case U::AddScalar: return {dy};                                   // y = x + s    => dx = dy
      case U::MulScalar: return {scale(dy, scalar)};                    // y = s·x      => dx = s·dy
      case U::Exp: return {mul_raw(dy, v)};                             // y = eˣ       => dx = dy·y
      case U::Log: return {raw::binary(BinaryOp::Div, dy, v)};          // y = ln x     => dx = dy/x
      case U::Expm1: return {mul_raw(dy, raw::unary(U::AddScalar, v, 1.0))};  // y = eˣ - 1 => dx = dy·(y + 1)
      case U::Log1p:                                                    // y = ln(1 + x) => dx = dy/(1 + x)
        return {raw::binary(BinaryOp::Div, dy, raw::unary(U::AddScalar, v, 1.0))};
      case U::Sqrt: return {raw::binary(BinaryOp::Div, scale(dy, 0.5), v)};  // y = √x => dx = dy/(2y)
      case U::Tanh: {                                                   // y = tanh x   => dx = dy·(1 - y²)
        const Tensor one_minus = raw::unary(U::AddScalar, raw::unary(U::Neg, mul_raw(v, v)), 1.0);
        return {mul_raw(dy, one_minus)};
      }
      case U::Sigmoid: {                                                // y = σ(x)     => dx = dy·y·(1 - y)
        const Tensor one_minus = raw::unary(U::AddScalar, raw::unary(U::Neg, v), 1.0);
        return {mul_raw(dy, mul_raw(v, one_minus))};
      }
      case U::Relu: {                                                   // y = max(x,0) => dx = dy·[y > 0]
        const Tensor zero = zeros(Shape{}, {.dtype = v.dtype(), .device = v.device()});
        return {raw::where(raw::binary(BinaryOp::Gt, v, zero), dy, zero)};  // Note [Masked gradients]
      }
      case U::Abs: return {mul_raw(dy, raw::unary(U::Sign, v))};        // y = |x|      => dx = dy·sign(x)
      case U::Erf: {                                                    // y = erf x    => dx = dy·2/√π·e^(-x²)
        const Tensor e = raw::unary(U::Exp, raw::unary(U::Neg, mul_raw(v, v)));
        return {mul_raw(dy, scale(e, 2.0 / std::sqrt(std::numbers::pi)))};
      }
      case U::Pow: {                                                    // y = xᵖ       => dx = dy·p·xᵖ⁻¹
        // p = 0: y = 1, dx = 0 exactly; p·xᵖ⁻¹ would be 0·inf = NaN at x = 0 (PyTorch's rule too).
        if (scalar == 0.0) return {zeros_like(dy)};
        // p = 2 (squared errors) is the common case: xᵖ⁻¹ is x itself, no pow call needed.
        const Tensor x_pm1 = scalar == 2.0 ? v : raw::unary(U::Pow, v, scalar - 1.0);
        return {mul_raw(dy, scale(x_pm1, scalar))};
      }
      case U::Sign: return {zeros_like(dy)};
    }
    MT_FAIL("UnaryBackward: no derivative for ", op_name(op));
  }
  void release_saved() override { saved.reset(), Node::release_saved(); }
  std::string name() const override { return std::string(op_name(op)) + "Backward"; }
};

Tensor unary_op(UnaryOp op, const Tensor& x, double scalar = 0.0) {
  Tensor y = raw::unary(op, x, scalar);
  if (auto node = record<UnaryBackward>({&x}, op, scalar)) {
    const bool needs_value = op != UnaryOp::Neg && op != UnaryOp::AddScalar && op != UnaryOp::MulScalar;
    if (needs_value) node->saved = SavedTensor(UnaryBackward::saves_output(op) ? y : x);
    set_history(y, node);
  }
  return y;
}

Tensor compare(BinaryOp op, const Tensor& a, const Tensor& b) { return raw::binary(op, a, b); }

struct ClampBackward final : Node {
  SavedTensor x;
  std::optional<double> lo, hi;
  // y = min(max(x, lo), hi)   =>   dx = dy·[lo <= x <= hi]   (the bounds themselves pass, like PyTorch)
  // With lo > hi no x is inside: y = hi everywhere and dx = 0, as in PyTorch.
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor xv = x.unpack(*this);
    Tensor inside = ones(Shape{}, {.dtype = xv.dtype(), .device = xv.device()});
    if (lo) inside = raw::binary(BinaryOp::Ge, xv, full(Shape{}, *lo, {.dtype = xv.dtype(), .device = xv.device()}));
    if (hi) {
      const Tensor below = raw::binary(BinaryOp::Le, xv, full(Shape{}, *hi, {.dtype = xv.dtype(), .device = xv.device()}));
      inside = lo ? mul_raw(inside, below) : below;
    }
    return {masked_mul(g[0], inside)};  // Note [Masked gradients]
  }
  void release_saved() override { x.reset(), Node::release_saved(); }
  std::string name() const override { return "ClampBackward"; }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_scaled(a, b, 1.0); }
Tensor sub(const Tensor& a, const Tensor& b) { return add_scaled(a, b, -1.0); }

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = raw::binary(BinaryOp::Mul, a, b);
  if (auto node = record<MulBackward>({&a, &b})) {
    // Each input's gradient needs the *other* input, so only save what will be used.
    if (detail::requires_grad(b)) node->a = SavedTensor(a);
    if (detail::requires_grad(a)) node->b = SavedTensor(b);
    node->ia = InputInfo(a), node->ib = InputInfo(b);
    set_history(y, node);
  }
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = raw::binary(BinaryOp::Div, a, b);
  if (auto node = record<DivBackward>({&a, &b})) {
    node->a = SavedTensor(a), node->b = SavedTensor(b), node->ia = InputInfo(a), node->ib = InputInfo(b);
    set_history(y, node);
  }
  return y;
}

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min(a, b, false); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor y = raw::where(cond, a, b);
  if (auto node = record<WhereBackward>({&a, &b})) {
    node->cond = SavedTensor(cond), node->ia = InputInfo(a), node->ib = InputInfo(b);
    set_history(y, node);
  }
  return y;
}

// The scalar becomes a 0-dim tensor of the other side's dtype (PyTorch's promotion: a Python
// number does not widen a floating tensor), or float32 beside an integer tensor when it is not whole.
namespace {
Tensor scalar_like(double s, const Tensor& t) {
  const bool whole = std::nearbyint(s) == s;
  const DType dtype = is_floating(t.dtype()) || whole ? t.dtype() : kFloat32;
  return full(Shape{}, s, {.dtype = dtype, .device = t.device()});
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_like(b, a)); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, scalar_like(a, b), b); }

Tensor add(const Tensor& a, double s) { return unary_op(UnaryOp::AddScalar, a, s); }
Tensor mul(const Tensor& a, double s) { return unary_op(UnaryOp::MulScalar, a, s); }
Tensor neg(const Tensor& x) { return unary_op(UnaryOp::Neg, x); }
// These five run in float32 under autocast (Note [Autocast op lists]).
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::Exp, autocast::to_float32(x)); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::Log, autocast::to_float32(x)); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, x); }
Tensor abs(const Tensor& x) { return unary_op(UnaryOp::Abs, x); }
Tensor erf(const Tensor& x) { return unary_op(UnaryOp::Erf, x); }
Tensor expm1(const Tensor& x) { return unary_op(UnaryOp::Expm1, autocast::to_float32(x)); }
Tensor log1p(const Tensor& x) { return unary_op(UnaryOp::Log1p, autocast::to_float32(x)); }
Tensor pow(const Tensor& x, double exponent) { return unary_op(UnaryOp::Pow, autocast::to_float32(x), exponent); }

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  MT_CHECK(min || max, "clamp: give at least one of min and max");
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  Tensor y = x;
  if (min) y = raw::binary(BinaryOp::Maximum, y, full(Shape{}, *min, like));
  if (max) y = raw::binary(BinaryOp::Minimum, y, full(Shape{}, *max, like));
  if (auto node = record<ClampBackward>({&x})) {
    node->x = SavedTensor(x), node->lo = min, node->hi = max;
    set_history(y, node);
  }
  return y;
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ge, a, b); }

}  // namespace mt
