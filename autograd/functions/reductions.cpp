// Differentiable reductions: sum, mean, max, min, var composed from them, std = √var with a
// node of its own (its gradient at 0), and logsumexp with its own (its max shift). Their backward spreads the output gradient back over the
// reduced dims (a broadcast), scaled for mean, masked to the extrema for max and min.
#include <algorithm>
#include <limits>

#include "autograd/autocast.h"
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

// `shape` without the reduced dims (all of them when dims is empty).
Shape dropped_dims(const Shape& shape, const std::vector<int64_t>& dims, const char* op) {
  Shape dropped;
  for (int i = 0; i < shape.size(); ++i)
    if (!(dims.empty() || std::count_if(dims.begin(), dims.end(), [&](int64_t d) { return wrap_dim(d, shape.size(), op) == i; })))
      dropped.push_back(shape[i]);
  return dropped;
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

// The backward of max and min (the same formula: the extremum is whichever one y holds).
struct ExtremumBackward final : Node {
  SavedTensor x, y;  // y with keepdim
  std::vector<int64_t> dims;
  bool keepdim = false;
  bool is_max = true;
  // y = max_dims x   =>   dx = dy·[x = y] / (number of maxima), so ties share the gradient evenly.
  // Selected rather than multiplied, so an infinite dy gives 0, not NaN, off the maxima
  // (Note [Masked gradients] in elementwise.cpp).
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor xv = x.unpack(*this), yv = y.unpack(*this);
    const Tensor mask = raw::binary(BinaryOp::Eq, xv, yv);
    const Tensor count = raw::sum(mask, dims, /*keepdim=*/true);
    const Tensor dy = raw::binary(BinaryOp::Div, unsqueeze_reduced(g[0], xv.sizes(), dims, keepdim), count);
    const Tensor zero = zeros(Shape{}, {.dtype = dy.dtype(), .device = dy.device()});
    return {raw::where(mask, dy, zero)};
  }
  void release_saved() override { x.reset(), y.reset(), Node::release_saved(); }
  std::string name() const override { return is_max ? "MaxBackward" : "MinBackward"; }
};

Tensor extremum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  Tensor y_keep = is_max ? raw::max(x, dims, /*keepdim=*/true) : raw::min(x, dims, /*keepdim=*/true);
  const Tensor y = keepdim ? y_keep : raw::view(y_keep, dropped_dims(x.sizes(), dims, op));
  if (auto node = record<ExtremumBackward>({&x})) {
    node->x = SavedTensor(x), node->y = SavedTensor(y_keep), node->dims = dims, node->keepdim = keepdim;
    node->is_max = is_max;
    set_history(y, node);
  }
  return y;
}

// y = √v with v = var(x)   =>   dv = dy/(2y), and 0 where y = 0.
// Note [Std at zero]: where a slice is constant its std is 0, and the chain rule through √ and var
// gives dx = dy/(2·0)·2(x - mean)/(n - c) = inf·0 = NaN for every element of the slice, which would
// spread through any loss that adds the std of a constant slice. PyTorch sends 0 there instead (the
// std's subgradient nearest the mean), and so does this node: selected, not multiplied, as in
// Note [Masked gradients] (elementwise.cpp). Plain sqrt keeps its infinite gradient at 0.
struct StdBackward final : Node {
  SavedTensor y;  // the std
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor yv = y.unpack(*this);
    const Tensor zero = zeros(Shape{}, {.dtype = yv.dtype(), .device = yv.device()});
    const Tensor dv = raw::binary(BinaryOp::Div, raw::unary(UnaryOp::MulScalar, g[0], 0.5), yv);
    return {raw::where(raw::binary(BinaryOp::Eq, yv, zero), zero, dv)};
  }
  void release_saved() override { y.reset(), Node::release_saved(); }
  std::string name() const override { return "StdBackward"; }
};

// Note [Logsumexp shift]: log Σ exp(x) overflows once any x passes ~709 (float64; ~88 in float32),
// and underflows to log 0 = -inf when every x is below ~-745. With m = max x of the slice,
// log Σ exp(x) = m + log Σ exp(x - m), and every exp(x - m) is in (0, 1] with one of them 1, so the sum
// is in [1, n]. A slice whose max is ±inf takes m = 0 instead (as PyTorch does): x - m would be
// inf - inf = NaN there, while exp(±inf) already gives the right sum.
// y = log Σ exp(x)   =>   dx = dy·exp(x - y), the softmax of the slice. The composition m + log(sum(exp(x - m)))
// would give the same value, but the gradient would reach m through max's backward and cancel there
// only to rounding; this node writes the softmax directly.
struct LogsumexpBackward final : Node {
  SavedTensor x, y;  // y with keepdim
  std::vector<int64_t> dims;
  bool keepdim = false;
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor xv = x.unpack(*this), yv = y.unpack(*this);
    const Tensor p = raw::unary(UnaryOp::Exp, raw::binary(BinaryOp::Sub, xv, yv));
    return {raw::binary(BinaryOp::Mul, unsqueeze_reduced(g[0], xv.sizes(), dims, keepdim), p)};
  }
  void release_saved() override { x.reset(), y.reset(), Node::release_saved(); }
  std::string name() const override { return "LogsumexpBackward"; }
};

}  // namespace

Tensor logsumexp(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast::to_float32(x_in);  // Note [Autocast op lists]
  MT_CHECK(is_floating(x.dtype()), "logsumexp: needs a floating dtype, got ", x.dtype());
  // m: (x with dims kept as 1), 0 where the slice's max is infinite (Note [Logsumexp shift]).
  const Tensor m_raw = raw::max(x, dims, /*keepdim=*/true);
  const Tensor inf = full(Shape{}, std::numeric_limits<double>::infinity(), {.dtype = x.dtype(), .device = x.device()});
  const Tensor zero = zeros(Shape{}, {.dtype = x.dtype(), .device = x.device()});
  const Tensor m = raw::where(raw::binary(BinaryOp::Eq, raw::unary(UnaryOp::Abs, m_raw), inf), zero, m_raw);
  const Tensor s = raw::sum(raw::unary(UnaryOp::Exp, raw::binary(BinaryOp::Sub, x, m)), dims, /*keepdim=*/true);
  const Tensor y_keep = raw::binary(BinaryOp::Add, raw::unary(UnaryOp::Log, s), m);
  const Tensor y = keepdim ? y_keep : raw::view(y_keep, dropped_dims(x.sizes(), dims, "logsumexp"));
  if (auto node = record<LogsumexpBackward>({&x})) {
    node->x = SavedTensor(x), node->y = SavedTensor(y_keep), node->dims = dims, node->keepdim = keepdim;
    set_history(y, node);
  }
  return y;
}

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast::to_float32(x_in);  // Note [Autocast op lists]
  Tensor y = raw::sum(x, dims, keepdim);
  if (auto node = record<SumBackward>({&x})) {
    node->in_shape = x.sizes(), node->dims = dims, node->keepdim = keepdim;
    set_history(y, node);
  }
  return y;
}

Tensor mean(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast::to_float32(x_in);  // Note [Autocast op lists]
  Tensor y = raw::mean(x, dims, keepdim);
  if (auto node = record<SumBackward>({&x})) {
    node->in_shape = x.sizes(), node->dims = dims, node->keepdim = keepdim;
    node->scale = static_cast<double>(y.numel()) / static_cast<double>(std::max<int64_t>(x.numel(), 1));
    set_history(y, node);
  }
  return y;
}

Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return extremum(x, dims, keepdim, true); }
Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return extremum(x, dims, keepdim, false); }

// var = Σ (x - mean)² / (n - 1 when unbiased, else n), n the number of elements reduced. Composed
// from differentiable ops, so its backward is theirs: dx = dy·2(x - mean)/(n - c) (the mean's own
// gradient contributes Σ(x - mean) = 0). n = 1 with unbiased divides by 0: the value is NaN, as in
// PyTorch, and so is the gradient (0·inf), what 0/0 is; PyTorch 1.13 returns dy·inf for it instead.
// bfloat16 and float16: computed in float32 and rounded once, as PyTorch's CPU var does (five
// 16-bit roundings on the way would cost up to several ulps); the casts are graph nodes, so the
// gradient comes back in x's dtype.
Tensor var(const Tensor& x_in, const std::vector<int64_t>& dims, VarOptions options) {
  const Tensor x = autocast::to_float32(x_in);  // Note [Autocast op lists]; std is var's too
  MT_CHECK(is_floating(x.dtype()), "var: needs a floating dtype, got ", x.dtype());
  if (is_low_precision(x.dtype())) return cast(var(cast(x, kFloat32), dims, options), x.dtype());
  const Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  Tensor ss = sum(centered * centered, dims, options.keepdim);
  const int64_t n = x.numel() / std::max<int64_t>(ss.numel(), 1);
  const double divisor = static_cast<double>(n) - (options.unbiased ? 1.0 : 0.0);
  return ss * (1.0 / divisor);
}

// √var, with its own node for the gradient at 0: Note [Std at zero].
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, VarOptions options) {
  const Tensor v = var(x, dims, options);
  Tensor y = raw::unary(UnaryOp::Sqrt, v);
  if (auto node = record<StdBackward>({&v})) {
    node->y = SavedTensor(y);
    set_history(y, node);
  }
  return y;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return raw::argmax(x, dim, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return raw::argmin(x, dim, keepdim); }

// Note [Max along a dim returns indices]: x.max(dim) returns (values, indices) as libtorch's does,
// so `auto [v, i] = x.max(1)` works; the values-only reduction is x.amax(dims) (mt::max(x, dims)).
// Not a values tensor that can also be decomposed: a type that is both would let `auto v = x.max(1)`
// mean different things in minitrain and libtorch, while the tuple makes code move between the two
// unchanged, and the few callers that wanted values alone say amax, libtorch's name for it.
// The values are x gathered at the indices, so their gradient is gather's: dy goes to the one
// indexed element, the first on ties, as in PyTorch. amax's gradient shares dy among the ties
// instead (ExtremumBackward); for a unique extremum the two agree.
namespace {
std::tuple<Tensor, Tensor> extremum_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const Tensor index = is_max ? raw::argmax(x, dim, /*keepdim=*/true) : raw::argmin(x, dim, /*keepdim=*/true);
  const Tensor values = gather(x, dim, index);
  if (keepdim || x.dim() == 0) return {values, index};  // a 0-dim input gives 0-dim results either way
  return {values.squeeze(dim), raw::squeeze(index, dim)};
}
}  // namespace

std::tuple<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(x, dim, keepdim, true); }
std::tuple<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(x, dim, keepdim, false); }

}  // namespace mt
