// conv1d, conv2d over a unit height; and conv_transpose2d, the adjoint of conv2d in its input, one
// node over conv2d's raw ops (tensor/raw_conv.cpp).
//
// Note [Transposed convolution is conv2d's input gradient]: conv2d with weight w (C, O/groups, kh, kw),
// read as a convolution from O to C channels, maps y (N, O, OH, OW) to x (N, C, H, W); its input
// gradient maps x back to (N, O, OH, OW). That map is conv_transpose2d, so
//   forward   y  = conv2d_backward(dy = x, input shape (N, O, OH, OW), w).dx     (+ b per channel)
//   backward  dx = conv2d(dy, w)                  the adjoint's adjoint is the convolution itself
//             dw = conv2d_backward(dy = x, input = dy, w).dw   (the same bilinear form, read in w)
//             db = Σ_{n, h, w} dy
// with the convolution's stride, padding, dilation and groups. output_padding makes OH one of the
// `stride` sizes whose convolution gives back H, so it must be < stride.
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "autograd/spatial_ops.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

struct ConvTranspose2dBackward final : Node {
  SavedTensor x, w;
  Conv2dOptions options;  // of the convolution whose input gradient the forward is
  bool has_bias = false;
  TensorList apply(TensorList&& g) override {
    check_not_released();
    const Tensor x_ = x.unpack(*this), w_ = w.unpack(*this);
    Tensor dx, dw, db;
    if (next_edges[0].valid()) dx = raw::conv2d(g[0], w_, Tensor(), options);
    if (next_edges[1].valid())
      dw = raw::conv2d_backward(x_, g[0], w_, options, {.dx = false, .dw = true, .db = false}).dw;
    if (has_bias && next_edges[2].valid()) db = raw::sum(g[0], {0, 2, 3});
    return {dx, dw, db};
  }
  void release_saved() override { x.reset(), w.reset(), Node::release_saved(); }
  std::string name() const override { return "ConvTranspose2dBackward"; }
};

int64_t transposed_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t out_pad) {
  return (in - 1) * stride - 2 * pad + dilation * (kernel - 1) + out_pad + 1;
}

Tensor conv_transpose2d_batched(const Tensor& x, const Tensor& w, const Tensor& b, const ConvTranspose2dOptions& o) {
  MT_CHECK(x.dim() == 4 && w.dim() == 4, "conv_transpose2d: input must be (N, C, H, W) or (C, H, W) and weight ",
           "(C, O/groups, kh, kw), got ", x.sizes(), " and ", w.sizes());
  MT_CHECK(o.groups > 0 && w.size(0) == x.size(1) && x.size(1) % o.groups == 0, "conv_transpose2d: weight ",
           w.sizes(), " must have the input's ", x.size(1), " channels first, divisible by groups = ", o.groups);
  MT_CHECK(o.stride.h > 0 && o.stride.w > 0 && o.dilation.h > 0 && o.dilation.w > 0 && o.padding.h >= 0 &&
               o.padding.w >= 0, "conv_transpose2d: stride and dilation must be positive and padding non-negative");
  MT_CHECK(o.output_padding.h >= 0 && o.output_padding.w >= 0 && o.output_padding.h < o.stride.h &&
               o.output_padding.w < o.stride.w,
           "conv_transpose2d: output_padding ", o.output_padding, " must be non-negative and less than the stride ",
           o.stride);
  const int64_t oh = transposed_size(x.size(2), w.size(2), o.stride.h, o.padding.h, o.dilation.h, o.output_padding.h);
  const int64_t ow = transposed_size(x.size(3), w.size(3), o.stride.w, o.padding.w, o.dilation.w, o.output_padding.w);
  const int64_t out_channels = w.size(1) * o.groups;
  MT_CHECK(oh > 0 && ow > 0, "conv_transpose2d: input ", x.sizes(), " with weight ", w.sizes(), " and padding ",
           o.padding, " gives an empty output ", Size2(oh, ow));
  if (b.defined())
    MT_CHECK(b.dim() == 1 && b.size(0) == out_channels && b.dtype() == x.dtype(), "conv_transpose2d: bias ",
             b.sizes(), " (", b.dtype(), ") must be (", out_channels, ") of the input's dtype ", x.dtype());
  const Conv2dOptions conv{.stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups};
  // The convolution's input, for its shape only: a broadcast zero, never read (raw::conv2d_backward).
  const Shape out_shape{x.size(0), out_channels, oh, ow};
  const Tensor shape_only = raw::expand(zeros({1, 1, 1, 1}, {.dtype = x.dtype(), .device = x.device()}), out_shape);
  Tensor y = raw::conv2d_backward(x, shape_only, w, conv, {.dx = true, .dw = false, .db = false}).dx;
  if (b.defined()) raw::binary_(BinaryOp::Add, y, raw::view(b, Shape{1, out_channels, 1, 1}));
  if (auto node = record<ConvTranspose2dBackward>({&x, &w, &b})) {
    node->x = SavedTensor(x), node->w = SavedTensor(w), node->options = conv, node->has_bias = b.defined();
    set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                        const ConvTranspose2dOptions& options) {
  // Under autocast in low precision (Note [Autocast op lists]), each weight cast once per region.
  const Tensor x = autocast::to_lower(x_in), w = autocast::to_lower(w_in), b = autocast::to_lower(b_in);
  if (x.dim() == 3) return squeeze(conv_transpose2d_batched(unsqueeze(x, 0), w, b, options), 0);
  return conv_transpose2d_batched(x, w, b, options);
}

// x (N, C, L) -> (N, C, 1, L), w (O, C/g, k) -> (O, C/g, 1, k): the 2-D im2col reads one row, so the
// columns and GEMMs are the 1-D convolution's own.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dOptions& o) {
  MT_CHECK((x.dim() == 2 || x.dim() == 3) && w.dim() == 3, "conv1d: input must be (N, C, L) or (C, L) and weight ",
           "(O, C/groups, k), got ", x.sizes(), " and ", w.sizes());
  const Conv2dOptions conv{.stride = {1, o.stride}, .padding = {0, o.padding}, .dilation = {1, o.dilation},
                           .groups = o.groups};
  return squeeze(conv2d(unsqueeze(x, -2), unsqueeze(w, 2), b, conv), -2);
}

}  // namespace mt
