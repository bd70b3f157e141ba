// Batch normalisation's training-mode forward as one node, with its backward written out in closed
// form. Composed from differentiable ops (mean, sub, mul, pow, ...) the same function records about
// ten nodes whose backwards make some fifteen passes over the activations; here the forward makes six
// and the backward seven. tests/nn/test_cnn.cpp checks it against the composition and by gradcheck.
//
// Per channel c, over the n = N·H·W (or N·L) values x_i of that channel:
//   mean = Σ x_i / n      var = Σ (x_i - mean)² / n   (biased)      inv = 1/√(var + eps)
//   x̂_i = (x_i - mean)·inv      y_i = w·x̂_i + b
// Backward, with g_i = dy_i:
//   db = Σ g_i      dw = Σ g_i·x̂_i
//   dx_i = w·inv·(g_i - db/n - x̂_i·dw/n)
// (the two subtracted terms are the gradient flowing through mean and var).
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

Tensor mul_raw(const Tensor& a, const Tensor& b) { return raw::binary(BinaryOp::Mul, a, b); }
Tensor scale(const Tensor& a, double s) { return raw::unary(UnaryOp::MulScalar, a, s); }

struct BatchNormBackward final : Node {
  SavedTensor centered;  // x - mean: (N, C, ...)
  SavedTensor inv;       // 1/√(var + eps): (1, C, 1, ...)
  SavedTensor weight;    // (C) or undefined
  std::vector<int64_t> dims;  // every dim but 1
  Shape channel_shape;        // (1, C, 1, ...)
  int64_t n = 0;
  TensorList apply(TensorList&& grads) override {
    check_not_released();
    const Tensor g = grads[0], xc = centered.unpack(*this), iv = inv.unpack(*this);
    const Tensor w = weight.defined() ? raw::view(weight.unpack(*this), channel_shape) : Tensor();
    const Tensor db = raw::sum(g, dims, /*keepdim=*/true);                           // Σ g
    const Tensor dw = mul_raw(raw::sum(mul_raw(g, xc), dims, /*keepdim=*/true), iv);        // Σ g·x̂
    // dx = w·inv·(g - db/n - x̂·dw/n) with x̂·dw/n = xc·(inv·dw/n): per-channel factors, then 4 passes.
    const double per_n = 1.0 / static_cast<double>(n);
    Tensor dx = raw::binary(BinaryOp::Sub, g, mul_raw(xc, scale(mul_raw(iv, dw), per_n)));
    dx = raw::binary(BinaryOp::Sub, dx, scale(db, per_n));
    const Tensor factor = w.defined() ? mul_raw(w, iv) : iv;
    dx = mul_raw(dx, factor);
    Tensor grad_w, grad_b;
    if (next_edges[1].valid()) grad_w = raw::view(dw, Shape{channel_shape[1]});
    if (next_edges[2].valid()) grad_b = raw::view(db, Shape{channel_shape[1]});
    return {next_edges[0].valid() ? dx : Tensor(), grad_w, grad_b};
  }
  void release_saved() override { centered.reset(), inv.reset(), weight.reset(), Node::release_saved(); }
  std::string name() const override { return "BatchNormBackward"; }
};

}  // namespace

// Note [Low-precision batch norm]: a bfloat16 or float16 batch norm computes in float32 and rounds
// once (Note [Low-precision compute type]): x, weight and bias go through recorded casts to float32,
// the float32 node below runs, and y is cast back, so dx, dw and db are the float32 gradients rounded
// once too. The statistics (returned in stats) are float32; an in-place update of 16-bit running
// buffers rounds into them. The price is a float32 copy of x, kept for the backward as the centred
// x: memory a fused 16-bit kernel would not need.
Tensor batch_norm_train(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, double eps,
                        BatchNormStats* stats) {
  // In float32 under autocast (Note [Autocast op lists]).
  const Tensor x = autocast::to_float32(x_in), weight = autocast::to_float32(weight_in),
               bias = autocast::to_float32(bias_in);
  MT_CHECK(x.dim() >= 2, "batch_norm: input must be (N, C, ...), got shape ", x.sizes());
  MT_CHECK(is_floating(x.dtype()), "batch_norm: needs a floating dtype, got ", x.dtype());
  if (is_low_precision(x.dtype())) {
    const auto wide = [](const Tensor& t) { return t.defined() ? t.to(kFloat32) : t; };
    return batch_norm_train(x.to(kFloat32), wide(weight), wide(bias), eps, stats).to(x.dtype());
  }
  const int64_t c = x.size(1), n = x.numel() / std::max<int64_t>(c, 1);
  MT_CHECK(n > 1, "batch_norm: expected more than 1 value per channel when training, got input of shape ",
           x.sizes(), " (", n, " value per channel)");
  for (const Tensor* p : {&weight, &bias})
    MT_CHECK(!p->defined() || (p->dim() == 1 && p->size(0) == c), "batch_norm: weight and bias must be (", c,
             "), got ", p->sizes(), " for input ", x.sizes());
  std::vector<int64_t> dims;
  Shape channel_shape;
  for (int d = 0; d < x.dim(); ++d) {
    if (d != 1) dims.push_back(d);
    channel_shape.push_back(d == 1 ? c : 1);
  }
  const Tensor mean = raw::mean(x, dims, /*keepdim=*/true);
  const Tensor xc = raw::binary(BinaryOp::Sub, x, mean);
  const Tensor var = scale(raw::sum(mul_raw(xc, xc), dims, /*keepdim=*/true), 1.0 / static_cast<double>(n));
  const Tensor inv = raw::unary(UnaryOp::Pow, raw::unary(UnaryOp::AddScalar, var, eps), -0.5);
  // y = xc·(w·inv) + b: the per-channel product first, so two passes over x remain.
  Tensor y = mul_raw(xc, weight.defined() ? mul_raw(raw::view(weight, channel_shape), inv) : inv);
  if (bias.defined()) y = raw::binary(BinaryOp::Add, y, raw::view(bias, channel_shape));
  if (stats) *stats = {raw::view(mean, Shape{c}), raw::view(var, Shape{c})};
  if (auto node = record<BatchNormBackward>({&x, &weight, &bias})) {
    node->centered = SavedTensor(xc), node->inv = SavedTensor(inv);
    if (weight.defined()) node->weight = SavedTensor(weight);
    node->dims = dims, node->channel_shape = channel_shape, node->n = n;
    set_history(y, node);
  }
  return y;
}

}  // namespace mt
