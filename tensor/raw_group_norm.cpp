// raw::group_norm and group_norm_backward: the checks and shapes around Backend::group_norm
// (tensor/backend.h), and the error for a backend without it. x: (N, C, *) is seen as (N, C, S) with
// S = Π* (1 for a 2-D x); a group's channels and positions are then one contiguous run of D = (C/G)·S.
#include "tensor/raw_ops.h"

namespace mt {

void Backend::group_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         double) {
  MT_CHECK(false, "group_norm: this backend has no group norm kernel (has_group_norm() is false)");
}
void Backend::group_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, const Tensor&) {
  MT_CHECK(false, "group_norm_backward: this backend has no group norm kernel (has_group_norm() is false)");
}

namespace raw {
namespace {

// x: (N, C, *) as the (N, C, S) the kernels take.
Tensor as_ncs(const Tensor& x) {
  int64_t s = 1;
  for (int d = 2; d < x.dim(); ++d) s *= x.size(d);
  return view(contiguous(x), Shape{x.size(0), x.size(1), s});
}

// t (contiguous) when defined, else C copies of value: the kernels always take a weight and a bias
// (Note [Layer norm without affine], tensor/raw_transformer.cpp).
Tensor channel_affine_or(const Tensor& t, double value, const Tensor& x) {
  if (t.defined()) return contiguous(t);
  return full(Shape{x.size(1)}, value, {.dtype = x.dtype(), .device = x.device()});
}

}  // namespace

bool group_norm_applies(const Tensor& x) {
  return x.dim() >= 2 && (x.dtype() == kFloat32 || x.dtype() == kFloat64) && backend(x.device()).has_group_norm();
}

GroupNormResult group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  MT_CHECK(group_norm_applies(x), "group_norm: needs a float32 or float64 input of 2 dims or more on a backend "
           "with the kernel, got ", x.sizes(), " ", x.dtype(), " on ", x.device());
  const int64_t n = x.size(0), c = x.size(1);
  MT_CHECK(groups > 0 && c % groups == 0, "group_norm: num_groups (", groups,
           ") must be positive and divide the channels (", c, ") of input ", x.sizes());
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    const char* what = t == &weight ? "weight " : "bias ";
    MT_CHECK(t->device() == x.device() && t->dtype() == x.dtype(), "group_norm: ", what, t->dtype(), " on ",
             t->device(), " must be the input's ", x.dtype(), " on ", x.device());
    MT_CHECK(t->sizes() == Shape{c}, "group_norm: ", what, t->sizes(), " must be (", c, "), the channels of input ",
             x.sizes());
  }
  MT_CHECK(eps >= 0, "group_norm: eps must be non-negative, got ", eps);
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  GroupNormResult r{empty(x.sizes(), opts), empty(Shape{n, groups}, opts), empty(Shape{n, groups}, opts)};
  const Tensor x3 = as_ncs(x);
  backend(x.device()).group_norm(view(r.out, x3.sizes()), r.mean, r.rstd, x3, channel_affine_or(weight, 1.0, x),
                                 channel_affine_or(bias, 0.0, x), eps);
  return r;
}

GroupNormGrads group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd) {
  MT_CHECK(group_norm_applies(x) && dy.sizes() == x.sizes(), "group_norm_backward: gradient ", dy.sizes(),
           " must match the input ", x.sizes(), ", float32 or float64 on a backend with the kernel");
  MT_CHECK(mean.dim() == 2 && mean.size(0) == x.size(0) && rstd.sizes() == mean.sizes(),
           "group_norm_backward: mean ", mean.sizes(), " and rstd ", rstd.sizes(), " must be (N, G) for input ",
           x.sizes());
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  const Shape c{x.size(1)};
  GroupNormGrads g{empty(x.sizes(), opts), empty(c, opts), empty(c, opts)};
  const Tensor x3 = as_ncs(x);
  backend(x.device()).group_norm_backward(view(g.dx, x3.sizes()), g.dweight, g.dbias, as_ncs(cast(dy, x.dtype())),
                                          x3, channel_affine_or(weight, 1.0, x), contiguous(mean), contiguous(rstd));
  return g;
}

}  // namespace raw
}  // namespace mt
