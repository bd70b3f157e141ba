// raw::batch_norm_stats, batch_norm_relu and batch_norm_relu_backward (see raw_batch_norm.h): checks,
// shapes and the pool's resolved geometry around the backend's kernels, and the base Backend's
// answers for a backend without them.
#include "tensor/raw_batch_norm.h"

#include "tensor/raw_ops.h"

namespace mt {

void Backend::batch_norm_stats(const Tensor&, const Tensor&, const Tensor&) {
  MT_CHECK(false, "batch_norm_stats: this backend has no fused batch-norm kernels (has_batch_norm_relu() is false)");
}
void Backend::batch_norm_relu(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Window2d*) {
  MT_CHECK(false, "batch_norm_relu: this backend has no fused batch-norm kernels (has_batch_norm_relu() is false)");
}
void Backend::batch_norm_relu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Window2d*, bool) {
  MT_CHECK(false,
           "batch_norm_relu_backward: this backend has no fused batch-norm kernels (has_batch_norm_relu() is false)");
}

namespace raw {
namespace {

// The pool's geometry over x's planes, stride resolved (0: the kernel size).
Window2d pool_window(const Tensor& x, const Pool2dOptions& o) {
  const Size2 stride{o.stride.h == 0 ? o.kernel_size.h : o.stride.h, o.stride.w == 0 ? o.kernel_size.w : o.stride.w};
  return window2d(x.sizes(), o.kernel_size, stride, o.padding, o.dilation, "batch_norm_relu");
}

// x as (N, C, L) and a per-channel tensor's check: (C), x's dtype, contiguous.
Tensor planes_of(const Tensor& x) { return view(x, Shape{x.size(0), x.size(1), x.size(2) * x.size(3)}); }
void check_channel(const Tensor& t, const Tensor& x, const char* what) {
  MT_CHECK(t.dim() == 1 && t.size(0) == x.size(1) && t.dtype() == x.dtype() && t.is_contiguous(), "batch_norm_relu: ",
           what, " must be a contiguous (", x.size(1), ") tensor of ", x.dtype(), ", got ", t.sizes(), " ", t.dtype());
}

}  // namespace

bool batch_norm_relu_applies(const Tensor& x, const std::optional<Pool2dOptions>& pool) {
  const bool inside = !pool || (pool->padding == Size2(0) && pool->dilation == Size2(1) && !pool->ceil_mode);
  return x.dim() == 4 && (x.dtype() == kFloat32 || x.dtype() == kFloat64) && inside &&
         backend(x.device()).has_batch_norm_relu();
}

BatchNormMoments batch_norm_stats(const Tensor& x) {
  MT_CHECK(batch_norm_relu_applies(x, std::nullopt), "batch_norm_stats: needs a float32 or float64 (N, C, H, W) "
           "input on a backend with the kernel, got ", x.sizes(), " ", x.dtype(), " on ", x.device());
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  BatchNormMoments m{empty({x.size(1)}, like), empty({x.size(1)}, like)};
  backend(x.device()).batch_norm_stats(m.mean, m.var, planes_of(contiguous(x)));
  return m;
}

BatchNormReluResult batch_norm_relu(const Tensor& x, const Tensor& mean, const Tensor& scale, const Tensor& shift,
                                    const std::optional<Pool2dOptions>& pool) {
  MT_CHECK(batch_norm_relu_applies(x, pool), "batch_norm_relu: needs a float32 or float64 (N, C, H, W) input on a "
           "backend with the kernel and a pool without padding, dilation or ceil_mode, got ", x.sizes(), " ",
           x.dtype(), " on ", x.device());
  check_channel(mean, x, "mean"), check_channel(scale, x, "scale"), check_channel(shift, x, "shift");
  const Tensor in = contiguous(x);
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  if (!pool) {
    Tensor out = empty(x.sizes(), like);
    backend(x.device()).batch_norm_relu(planes_of(out), Tensor(), planes_of(in), mean, scale, shift, nullptr);
    return {out, Tensor()};
  }
  const Window2d w = pool_window(x, *pool);
  const Shape shape{x.size(0), x.size(1), w.out_h(), w.out_w()};
  Tensor out = empty(shape, like);
  Tensor indices = empty(shape, {.dtype = kInt64, .device = x.device()});
  const Shape flat{x.size(0), x.size(1), w.out_h() * w.out_w()};
  backend(x.device()).batch_norm_relu(view(out, flat), view(indices, flat), planes_of(in), mean, scale, shift, &w);
  return {out, indices};
}

BatchNormReluGrads batch_norm_relu_backward(const Tensor& dout, const Tensor& out, const Tensor& indices,
                                            const Tensor& x, const Tensor& mean, const Tensor& inv,
                                            const Tensor& scale, const std::optional<Pool2dOptions>& pool,
                                            bool batch_stats) {
  MT_CHECK(batch_norm_relu_applies(x, pool), "batch_norm_relu_backward: needs a float32 or float64 (N, C, H, W) "
           "input on a backend with the kernel, got ", x.sizes(), " ", x.dtype(), " on ", x.device());
  check_channel(mean, x, "mean"), check_channel(inv, x, "inv"), check_channel(scale, x, "scale");
  MT_CHECK(dout.sizes() == out.sizes() && dout.dtype() == x.dtype(), "batch_norm_relu_backward: dout ", dout.sizes(),
           " ", dout.dtype(), " does not match the output ", out.sizes(), " ", x.dtype());
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  BatchNormReluGrads g{empty(x.sizes(), like), empty({x.size(1)}, like), empty({x.size(1)}, like)};
  const Tensor in = contiguous(x), dy = contiguous(dout);
  const Shape flat{out.size(0), out.size(1), out.size(2) * out.size(3)};
  if (!pool) {
    backend(x.device()).batch_norm_relu_backward(planes_of(g.dx), g.dweight, g.dbias, view(dy, flat), view(out, flat),
                                                 Tensor(), planes_of(in), mean, inv, scale, nullptr, batch_stats);
    return g;
  }
  const Window2d w = pool_window(x, *pool);
  MT_CHECK(out.size(2) == w.out_h() && out.size(3) == w.out_w() && indices.sizes() == out.sizes(),
           "batch_norm_relu_backward: the pooled output ", out.sizes(), " and indices ", indices.sizes(),
           " do not match the pool over ", x.sizes());
  backend(x.device()).batch_norm_relu_backward(planes_of(g.dx), g.dweight, g.dbias, view(dy, flat), view(out, flat),
                                               view(indices, flat), planes_of(in), mean, inv, scale, &w, batch_stats);
  return g;
}

}  // namespace raw
}  // namespace mt
