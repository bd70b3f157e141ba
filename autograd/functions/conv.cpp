// Differentiable sliding-window ops: unfold/fold, conv2d, max and average pooling. conv2d and
// max_pool2d are one node each over raw ops (tensor/raw_conv.cpp has the GEMM formulation);
// average pooling is composed from unfold and sum, so its backward is fold's. Each takes an
// unbatched (C, H, W) input too, as a batch of one (unbatched below).
#include <algorithm>
#include <type_traits>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "autograd/spatial_ops.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

// unfold and fold are each other's adjoint:
//   y = unfold(x)   =>   dx = fold(dy)        y = fold(x)   =>   dx = unfold(dy)
struct UnfoldBackward final : Node {
  UnfoldOptions options;
  Size2 in_size;  // (H, W) of x
  TensorList apply(TensorList&& g) override { return {raw::fold(g[0], in_size, options)}; }
  std::string name() const override { return "UnfoldBackward"; }
};

struct FoldBackward final : Node {
  UnfoldOptions options;
  TensorList apply(TensorList&& g) override { return {raw::unfold(g[0], options)}; }
  std::string name() const override { return "FoldBackward"; }
};

// y = x ⋆ w + b   =>   dx = col2im(wᵀ·dy),  dw = Σ_n dy·im2col(x)ᵀ,  db = Σ_{n,h,w} dy
// (per group; raw::conv2d_backward writes it out).
struct Conv2dBackward final : Node {
  SavedTensor x, w;
  Conv2dOptions options;
  bool has_bias = false;
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const raw::Conv2dNeeds needs{.dx = next_edges[0].valid(), .dw = next_edges[1].valid(),
                                 .db = has_bias && next_edges[2].valid()};
    raw::Conv2dGrads r = raw::conv2d_backward(g[0], x.unpack(*this), w.unpack(*this), options, needs);
    return {r.dx, r.dw, r.db};
  }
  void release_saved() override { x.reset(), w.reset(), Node::release_saved(); }
  std::string name() const override { return "Conv2dBackward"; }
};

// y = max over each window   =>   dx[argmax] += dy: the gradient goes to the element that won
// (one per window; overlapping windows that share a winner add up). A scatter_add along the
// flattened plane, with the indices the forward recorded.
struct MaxPool2dBackward final : Node {
  SavedTensor indices;  // (N, C, OH, OW) int64, h·W + w within each plane
  Shape in_shape;       // (N, C, H, W)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const int64_t planes = in_shape[0] * in_shape[1];
    const Tensor idx = raw::reshape(indices.unpack(*this), Shape{planes, -1});
    const Tensor dy = raw::reshape(g[0], Shape{planes, -1});
    const Tensor dx = raw::scatter_add_zeros(Shape{planes, in_shape[2] * in_shape[3]}, 1, idx, dy);
    return {raw::view(dx, in_shape)};
  }
  void release_saved() override { indices.reset(), Node::release_saved(); }
  std::string name() const override { return "MaxPool2dBackward"; }
};

// PyTorch's unbatched inputs: a (C, H, W) x runs as (1, C, H, W), and the results lose the batch dim again.
template <typename F>
auto unbatched(const Tensor& x, F&& f) {
  if (x.dim() != 3) return f(x);
  auto r = f(unsqueeze(x, 0));
  if constexpr (std::is_same_v<decltype(r), Tensor>) {
    return squeeze(r, 0);
  } else {
    return decltype(r){squeeze(r.first, 0), squeeze(r.second, 0)};
  }
}

// avg_pool2d's divisor for each output position, (OH·OW), as PyTorch computes it: the window clipped
// to the padded input (count_include_pad), or to the input itself. Without ceil_mode and with
// count_include_pad every window lies inside the padded input, and the divisor is kh·kw.
std::vector<double> avg_pool_divisors(const Window2d& w, bool count_include_pad) {
  const auto extent = [&](int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t in) {
    const int64_t start = o * stride - pad, end = std::min(start + kernel, in + pad);
    return count_include_pad ? end - start : std::min(end, in) - std::max<int64_t>(start, 0);
  };
  std::vector<double> d;
  for (int64_t oh = 0; oh < w.out_h(); ++oh)
    for (int64_t ow = 0; ow < w.out_w(); ++ow)
      d.push_back(static_cast<double>(extent(oh, w.stride_h, w.pad_h, w.kernel_h, w.in_h) *
                                      extent(ow, w.stride_w, w.pad_w, w.kernel_w, w.in_w)));
  return d;
}

Tensor avg_pool2d_batched(const Tensor& x, const Pool2dOptions& options) {
  MT_CHECK(x.dim() == 4, "avg_pool2d: input must be (N, C, H, W) or (C, H, W), got shape ", x.sizes());
  const Pool2dOptions o = raw::resolve_pool(options);
  MT_CHECK(o.dilation == Size2(1), "avg_pool2d: dilation is not supported (got ", o.dilation, ")");
  MT_CHECK(2 * o.padding.h <= o.kernel_size.h && 2 * o.padding.w <= o.kernel_size.w, "avg_pool2d: padding ",
           o.padding, " must be at most half the kernel size ", o.kernel_size);
  Window2d w = raw::window2d(x.sizes(), o.kernel_size, o.stride, o.padding, 1, "avg_pool2d");
  w.ceil_mode = o.ceil_mode;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const Shape out_shape{n, c, w.out_h(), w.out_w()};
  // ceil_mode's last windows overhang the padded input (Note [Pooling ceil_mode]): zeros on the
  // bottom and right make unfold's windows the same ones, summing the same elements.
  const int64_t extra_h = std::max<int64_t>(0, (w.out_h() - 1) * o.stride.h + o.kernel_size.h - (h + 2 * o.padding.h));
  const int64_t extra_w = std::max<int64_t>(0, (w.out_w() - 1) * o.stride.w + o.kernel_size.w - (wd + 2 * o.padding.w));
  Tensor planes = reshape(x, Shape{n * c, 1, h, wd});
  if (extra_h > 0 || extra_w > 0) planes = pad(planes, {0, extra_w, 0, extra_h});
  const UnfoldOptions uo{.kernel_size = o.kernel_size, .padding = o.padding, .stride = o.stride};
  const Tensor cols = unfold(planes, uo);  // (N·C, kh·kw, L)
  if (o.count_include_pad && !o.ceil_mode) return reshape(mean(cols, {1}), out_shape);
  const int64_t l = w.out_h() * w.out_w();
  const Tensor divisors = from_vector(avg_pool_divisors(w, o.count_include_pad), {1, l},
                                      {.dtype = kFloat64, .device = x.device()});
  return reshape(sum(cols, {1}) / raw::cast(divisors, x.dtype()), out_shape);  // (N·C, L) / (1, L)
}

}  // namespace

Tensor unfold(const Tensor& x, const UnfoldOptions& options) {
  Tensor y = raw::unfold(x, options);
  if (auto node = record<UnfoldBackward>({&x})) {
    node->options = options, node->in_size = {x.size(2), x.size(3)};
    set_history(y, node);
  }
  return y;
}

Tensor fold(const Tensor& x, Size2 output_size, const UnfoldOptions& options) {
  Tensor y = raw::fold(x, output_size, options);
  if (auto node = record<FoldBackward>({&x})) {
    node->options = options;
    set_history(y, node);
  }
  return y;
}

Tensor conv2d(const Tensor& x_arg, const Tensor& w_arg, const Tensor& b_arg, const Conv2dOptions& options) {
  // Under autocast in low precision (Note [Autocast op lists]), each weight cast once per region.
  const Tensor x_in = autocast::to_lower(x_arg), w = autocast::to_lower(w_arg), b = autocast::to_lower(b_arg);
  return unbatched(x_in, [&](const Tensor& x) {
    Tensor y = raw::conv2d(x, w, b, options);
    if (auto node = record<Conv2dBackward>({&x, &w, &b})) {
      node->x = SavedTensor(x), node->w = SavedTensor(w), node->options = options, node->has_bias = b.defined();
      set_history(y, node);
    }
    return y;
  });
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x_in, const Pool2dOptions& options) {
  return unbatched(x_in, [&](const Tensor& x) {
    raw::MaxPool2dResult r = raw::max_pool2d(x, options);
    if (auto node = record<MaxPool2dBackward>({&x})) {
      node->indices = SavedTensor(r.indices), node->in_shape = x.sizes();
      set_history(r.out, node);
    }
    return std::pair<Tensor, Tensor>{r.out, r.indices};
  });
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) { return max_pool2d_with_indices(x, options).first; }

// Each plane as a one-channel image, unfolded: (N·C, kh·kw, L); the window mean is the mean over
// dim 1 (count_include_pad: padding zeros count), or the sum divided by PyTorch's divisor
// (avg_pool_divisors) without count_include_pad or with ceil_mode.
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  return unbatched(x, [&](const Tensor& xb) { return avg_pool2d_batched(xb, options); });
}

// PyTorch's adaptive bins: output cell i of n covers input [floor(i·H/n), ceil((i+1)·H/n)). The mean
// over a rectangle of bins is the mean over its rows of the mean over its columns, so the two dims
// are pooled one after the other.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  MT_CHECK(x.dim() == 4 || x.dim() == 3, "adaptive_avg_pool2d: input must be (N, C, H, W) or (C, H, W), got shape ",
           x.sizes());
  MT_CHECK(output_size.h > 0 && output_size.w > 0, "adaptive_avg_pool2d: output size must be positive, got ",
           output_size);
  const int64_t h_dim = x.dim() - 2;
  if (output_size == Size2(1)) return mean(x, {h_dim, h_dim + 1}, /*keepdim=*/true);  // global average pooling
  const auto pool_dim = [](const Tensor& t, int dim, int64_t out) {
    const int64_t in = t.size(dim);
    MT_CHECK(in > 0, "adaptive_avg_pool2d: input of shape ", t.sizes(), " is empty in dim ", dim);
    std::vector<Tensor> bins;
    for (int64_t i = 0; i < out; ++i) {
      const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
      bins.push_back(mean(narrow(t, dim, start, end - start), {dim}, /*keepdim=*/true));
    }
    return cat(bins, dim);
  };
  return pool_dim(pool_dim(x, static_cast<int>(h_dim), output_size.h), static_cast<int>(h_dim + 1), output_size.w);
}

}  // namespace mt
