// Differentiable matmul, fused linear, softmax and log_softmax.
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

struct SoftmaxBackward final : Node {
  SavedTensor y;
  int64_t dim = -1;
  bool log = false;
  // softmax:      y = eˣ/Σeˣ      =>   dx = y·(dy - Σ dy·y)
  // log_softmax:  y = x - log Σeˣ =>   dx = dy - eʸ·Σ dy, with eʸ = softmax(x) = softmax(y) taken by the
  //               softmax kernel (one pass, its float exp vectorised: Note [Vectorised float exp])
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor yv = y.unpack(*this);
    const Tensor& dy = g[0];
    if (log) {
      const Tensor s = raw::sum(dy, {dim}, true);
      return {raw::binary(BinaryOp::Sub, dy, raw::binary(BinaryOp::Mul, raw::softmax(yv, dim), s))};
    }
    const Tensor s = raw::sum(raw::binary(BinaryOp::Mul, dy, yv), {dim}, true);
    return {raw::binary(BinaryOp::Mul, yv, raw::binary(BinaryOp::Sub, dy, s))};
  }
  void release_saved() override { y.reset(), Node::release_saved(); }
  std::string name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
};

Tensor softmax_op(const Tensor& x, int64_t dim, bool log) {
  Tensor y = log ? raw::log_softmax(x, dim) : raw::softmax(x, dim);
  if (auto node = record<SoftmaxBackward>({&x})) {
    node->y = SavedTensor(y), node->dim = dim, node->log = log;
    set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  // 1-D operands become matrices through differentiable views, so one backward covers every case.
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor r = matmul(a.dim() == 1 ? unsqueeze(a, 0) : a, b.dim() == 1 ? unsqueeze(b, 1) : b);
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

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = raw::linear(x, w, b);
  std::shared_ptr<LinearBackward> node =
      b.defined() ? record<LinearBackward>({&x, &w, &b}) : record<LinearBackward>({&x, &w});
  if (node) {
    node->x = SavedTensor::input(x), node->w = SavedTensor::input(w);
    set_history(y, node);
  }
  return y;
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, true); }

}  // namespace mt
