// Raw ops, part 4: the transformer kernels (layer norm, GELU, scaled dot-product attention) and the
// causal mask. Each checks its arguments, brings the operands into the layout the Backend method
// documents (tensor/backend.h), allocates the results and calls the device's kernel. The
// differentiable ops over these are in autograd/functions/transformer.cpp.
#include <cmath>

#include "tensor/raw_ops.h"

namespace mt::raw {

namespace {

void check_same_place(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  MT_CHECK(a.device() == b.device(), op, ": ", what, " is on ", b.device(), " but the input on ", a.device());
  MT_CHECK(a.dtype() == b.dtype(), op, ": ", what, " is ", b.dtype(), " but the input ", a.dtype());
}

// Note [Unit last stride]: the attention kernels (CPU and CUDA) step through a row of q, k, v, out
// and dout one element at a time and check strides[-1] == 1. A size-1 last dim may carry any stride
// (q.transpose(2, 3) of a (B, H, 1, T) tensor has head size 1 and last stride T), and contiguous()
// returns such a tensor as it is, since Tensor::is_contiguous ignores size-1 dims. Its stride is
// never used to step, so it is set to 1 on a view: no copy, and the check holds.
// Returns t when strides[-1] == 1, that view when size(-1) == 1, else a contiguous copy.
Tensor unit_last_stride(const Tensor& t) {
  if (t.stride(-1) == 1) return t;
  if (t.size(-1) != 1) return contiguous(t);
  Shape strides = t.strides();
  strides[static_cast<int>(t.dim()) - 1] = 1;
  return as_strided(t, t.sizes(), strides, t.storage_offset());
}

Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// Note [Layer norm without affine]: weight and bias may each be undefined, as in PyTorch's
// F.layer_norm(x, shape): no scale (weight 1), no shift (bias 0). The kernels always take both, so
// the missing one is filled here, once for every backend, with n ones or zeros like x: a small
// tensor next to x, and no kernel needs a second variant.
// t (contiguous) when defined, else n copies of value with x's dtype and device.
Tensor affine_or(const Tensor& t, double value, const Tensor& x) {
  if (t.defined()) return contiguous(t);
  return full(Shape{x.size(-1)}, value, {.dtype = x.dtype(), .device = x.device()});
}

}  // namespace

// ---- layer norm ---------------------------------------------------------------------------------

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  MT_CHECK(is_floating(x.dtype()), "layer_norm: needs a floating dtype, got ", x.dtype());
  MT_CHECK(x.dim() >= 1, "layer_norm: input must have at least 1 dim (the normalised one)");
  const int64_t n = x.size(-1);
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;  // Note [Layer norm without affine]
    check_same_place(x, *t, "layer_norm", t == &weight ? "weight" : "bias");
    MT_CHECK(t->sizes() == Shape{n}, "layer_norm: ", t == &weight ? "weight " : "bias ", t->sizes(),
             " must be (", n, "), the size of the input's last dim (input ", x.sizes(), ")");
  }
  MT_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got ", eps);
  const Tensor x2 = reshape(contiguous(x), Shape{-1, n});
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  // mean and rstd in the compute type: float32 for 16-bit x, as their sums are (both devices).
  const TensorOptions stats{.dtype = is_low_precision(x.dtype()) ? kFloat32 : x.dtype(), .device = x.device()};
  const Shape per_row = without_last(x.sizes());
  LayerNormResult r{empty(x.sizes(), opts), empty(per_row, stats), empty(per_row, stats)};
  const int64_t rows = x2.size(0);
  backend(x.device()).layer_norm(view(r.out, Shape{rows, n}), view(r.mean, Shape{rows}), view(r.rstd, Shape{rows}),
                                 x2, affine_or(weight, 1.0, x), affine_or(bias, 0.0, x), eps);
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd) {
  MT_CHECK(dy.sizes() == x.sizes(), "layer_norm_backward: gradient ", dy.sizes(), " must match the input ", x.sizes());
  const int64_t n = x.size(-1);
  const Tensor x2 = reshape(contiguous(x), Shape{-1, n});
  const int64_t rows = x2.size(0);
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  LayerNormGrads g{empty(x.sizes(), opts), empty(Shape{n}, opts), empty(Shape{n}, opts)};
  backend(x.device()).layer_norm_backward(view(g.dx, Shape{rows, n}), g.dweight, g.dbias,
                                          reshape(contiguous(cast(dy, x.dtype())), Shape{rows, n}), x2,
                                          affine_or(weight, 1.0, x), reshape(mean, Shape{rows}),
                                          reshape(rstd, Shape{rows}));
  return g;
}

// ---- GELU ---------------------------------------------------------------------------------------

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  MT_CHECK(is_floating(x.dtype()), "gelu: needs a floating dtype, got ", x.dtype());
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  backend(x.device()).gelu(out, contiguous(x), approximate);
  return out;
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x, GeluApproximate approximate) {
  MT_CHECK(dy.sizes() == x.sizes(), "gelu_backward: gradient ", dy.sizes(), " must match the input ", x.sizes());
  Tensor dx = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  backend(x.device()).gelu_backward(dx, contiguous(cast(dy, x.dtype())), contiguous(x), approximate);
  return dx;
}

// ---- attention ----------------------------------------------------------------------------------

AttentionParams attention_params(const Tensor& q, const AttentionOptions& options) {
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  return {.causal = options.causal, .scale = scale};
}

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& options) {
  const char* op = "scaled_dot_product_attention";
  MT_CHECK(is_floating(q.dtype()), op, ": needs a floating dtype, got ", q.dtype());
  MT_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k, v must be 4-D (B, H, T, d), got ", q.sizes(),
           ", ", k.sizes(), ", ", v.sizes());
  check_same_place(q, k, op, "k");
  check_same_place(q, v, op, "v");
  const Shape kv{q.size(0), q.size(1), k.size(2), q.size(3)};
  MT_CHECK(k.sizes() == kv && v.sizes() == kv, op, ": k ", k.sizes(), " and v ", v.sizes(), " must be ", kv,
           " for q ", q.sizes(), " (same batch, heads and head size)");
  MT_CHECK(q.size(2) > 0 && k.size(2) > 0, op, ": needs at least one query and one key, got q ", q.sizes(),
           " and k ", k.sizes());
  const TensorOptions opts{.dtype = q.dtype(), .device = q.device()};
  // lse in the compute type: float32 for 16-bit q, which the backward rebuilds every weight from (Note
  // [Low-precision attention], tensor/cpu/cpu_attention.cpp; Note [16-bit attention through float32
  // copies], tensor/cuda/cuda_attention.cu).
  const TensorOptions lse_opts{.dtype = is_low_precision(q.dtype()) ? kFloat32 : q.dtype(), .device = q.device()};
  AttentionResult r{empty(q.sizes(), opts), empty(without_last(q.sizes()), lse_opts)};
  backend(q.device()).attention(r.out, r.lse, unit_last_stride(q), unit_last_stride(k), unit_last_stride(v),
                                attention_params(q, options));
  return r;
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                                     const AttentionParams& params) {
  MT_CHECK(dout.sizes() == out.sizes(), "scaled_dot_product_attention_backward: gradient ", dout.sizes(),
           " must match the output ", out.sizes());
  const TensorOptions opts{.dtype = q.dtype(), .device = q.device()};
  AttentionGrads g{empty(q.sizes(), opts), empty(k.sizes(), opts), empty(v.sizes(), opts)};
  backend(q.device()).attention_backward(g.dq, g.dk, g.dv, unit_last_stride(cast(dout, q.dtype())),
                                         unit_last_stride(q), unit_last_stride(k), unit_last_stride(v),
                                         unit_last_stride(out), contiguous(lse), params);
  return g;
}

// ---- masks --------------------------------------------------------------------------------------

// [i + diagonal >= j] as a (rows, 1) column against a (1, cols) row: one comparison, any backend.
Tensor tril_mask(int64_t rows, int64_t cols, int64_t diagonal, Device device) {
  MT_CHECK(rows >= 0 && cols >= 0, "tril_mask: sizes must be non-negative, got ", rows, " x ", cols);
  const auto d = static_cast<double>(diagonal);
  const Tensor i = arange(d, d + static_cast<double>(rows), 1.0, {.dtype = kInt64, .device = device});
  const Tensor j = arange(cols, {.dtype = kInt64, .device = device});
  return binary(BinaryOp::Ge, view(i, Shape{rows, 1}), view(j, Shape{1, cols}));
}

}  // namespace mt::raw
