// Differentiable matmul, fused linear, softmax and log_softmax.
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::InputInfo;
using detail::record;
using detail::set_history;

namespace {

Tensor mT(const Tensor& t) { return raw::transpose(t, -1, -2); }

struct MatmulBackward final : Node {
  SavedTensor a, b;
  InputInfo ia, ib;
  // y = a·b   =>   da = dy·bᵀ,  db = aᵀ·dy   (summed over broadcast batch dims)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    Tensor da, db;
    if (next_edges[0].valid()) da = detail::reduce_grad(raw::matmul(g[0], mT(b.unpack(*this))), ia);
    if (next_edges[1].valid()) db = detail::reduce_grad(raw::matmul(mT(a.unpack(*this)), g[0]), ib);
    return {da, db};
  }
  void release_saved() override { a.reset(), b.reset(), Node::release_saved(); }
  std::string name() const override { return "MatmulBackward"; }
};

struct LinearBackward final : Node {
  SavedTensor x, w;
  // y = x·Wᵀ + b   =>   dx = dy·W,  dW = dyᵀ·x,  db = Σ_rows dy      (x, dy flattened to rows)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor xv = x.unpack(*this), wv = w.unpack(*this);
    // A 2-D x (and so dy) is used as it is: no reshape views, as in the forward (raw::linear).
    const bool flat = xv.dim() == 2;
    const Tensor dy = flat ? g[0] : raw::reshape(g[0], Shape{-1, wv.sizes()[0]});
    Tensor dx, dw, db;
    if (next_edges[0].valid()) {
      dx = raw::matmul(dy, wv);
      if (!flat) dx = raw::reshape(dx, xv.sizes());
    }
    if (next_edges[1].valid()) dw = raw::transposed_matmul(dy, flat ? xv : raw::reshape(xv, Shape{-1, wv.sizes()[1]}));
    if (next_edges.size() > 2 && next_edges[2].valid()) db = raw::sum(dy, {0});
    return next_edges.size() > 2 ? TensorList{dx, dw, db} : TensorList{dx, dw};
  }
  void release_saved() override { x.reset(), w.reset(), Node::release_saved(); }
  std::string name() const override { return "LinearBackward"; }
};

// softmax:      y = eˣ/Σeˣ      =>   dx = p·(dy - Σ dy·p)
// log_softmax:  y = x - log Σeˣ =>   dx = dy - p·Σ dy
// with p = softmax(x): y itself for softmax, softmax(y) for log_softmax (one pass of the softmax
// kernel, its float exp vectorised: Note [Vectorised float exp]).
Tensor softmax_grad(const Tensor& p, const Tensor& dy, int64_t dim, bool log) {
  if (log) return raw::binary(BinaryOp::Sub, dy, raw::binary(BinaryOp::Mul, p, raw::sum(dy, {dim}, true)));
  const Tensor s = raw::sum(raw::binary(BinaryOp::Mul, dy, p), {dim}, true);
  return raw::binary(BinaryOp::Mul, p, raw::binary(BinaryOp::Sub, dy, s));
}

// Note [Low-precision softmax backward]: for a bfloat16 or float16 x the node keeps x, not y, and
// its backward takes p = softmax(x) in float32, runs the formula in float32 and rounds dx once
// (Note [Low-precision compute type]). From the rounded y instead, p is off by y's rounding
// (log_softmax's e^y by |y| times it), and Σ dy·p cancels in dy - Σ dy·p: dx came out more than
// one ulp from the float32 gradient. The float32 temporaries are of x's size, during the backward.
struct SoftmaxBackward final : Node {
  SavedTensor saved;  // y; x for 16-bit dtypes
  int64_t dim = -1;
  bool log = false;
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor t = saved.unpack(*this);
    if (!is_low_precision(t.dtype())) return {softmax_grad(log ? raw::softmax(t, dim) : t, g[0], dim, log)};
    const Tensor p = raw::softmax(raw::cast(t, kFloat32), dim);  // Note [Low-precision softmax backward]
    return {raw::cast(softmax_grad(p, raw::cast(g[0], kFloat32), dim, log), t.dtype())};
  }
  void release_saved() override { saved.reset(), Node::release_saved(); }
  std::string name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
};

Tensor softmax_op(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = autocast::to_float32(x_in);  // Note [Autocast op lists]
  Tensor y = log ? raw::log_softmax(x, dim) : raw::softmax(x, dim);
  if (auto node = record<SoftmaxBackward>({&x})) {
    node->saved = SavedTensor(is_low_precision(x.dtype()) ? x : y), node->dim = dim, node->log = log;
    set_history(y, node);
  }
  return y;
}

// y = a·b on inputs autocast has already seen.
Tensor matmul_op(const Tensor& a, const Tensor& b) {
  // 1-D operands become matrices through differentiable views, so one backward covers every case.
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor r = matmul_op(a.dim() == 1 ? unsqueeze(a, 0) : a, b.dim() == 1 ? unsqueeze(b, 1) : b);
    if (b.dim() == 1) r = squeeze(r, -1);                      // (..., M, 1) -> (..., M)
    if (a.dim() == 1) r = squeeze(r, b.dim() == 1 ? -1 : -2);  // (..., 1, N) -> (..., N)
    return r;
  }
  Tensor y = raw::matmul(a, b);
  if (auto node = record<MatmulBackward>({&a, &b})) {
    node->a = SavedTensor(a), node->b = SavedTensor(b), node->ia = InputInfo(a), node->ib = InputInfo(b);
    set_history(y, node);
  }
  return y;
}

Tensor linear_op(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = raw::linear(x, w, b);
  std::shared_ptr<LinearBackward> node =
      b.defined() ? record<LinearBackward>({&x, &w, &b}) : record<LinearBackward>({&x, &w});
  if (node) {
    node->x = SavedTensor::input(x), node->w = SavedTensor::input(w);
    set_history(y, node);
  }
  return y;
}

}  // namespace

// Under autocast both run in low precision (Note [Autocast op lists]), each weight cast once per
// region (Note [Autocast cast cache]). Autocast is asked first, so that a step without it copies no
// tensor handle: the seed model's whole step takes about 2 µs.
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::is_enabled()) return matmul_op(autocast::to_lower(a), autocast::to_lower(b));
  return matmul_op(a, b);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autocast::is_enabled()) return linear_op(autocast::to_lower(x), autocast::to_lower(w), autocast::to_lower(b));
  return linear_op(x, w, b);
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, true); }

}  // namespace mt
