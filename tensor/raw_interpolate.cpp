// raw::bilinear and bilinear_backward: the checks and shapes around Backend::bilinear (tensor/backend.h),
// and the error for a backend without it. The planes are every dim before the last two, flattened.
#include "tensor/raw_ops.h"

namespace mt {

void Backend::bilinear(const Tensor&, const Tensor&, const LinearTaps&, const LinearTaps&) {
  MT_CHECK(false, "bilinear: this backend has no bilinear kernel (has_bilinear() is false)");
}
void Backend::bilinear_backward(const Tensor&, const Tensor&, const LinearTaps&, const LinearTaps&) {
  MT_CHECK(false, "bilinear_backward: this backend has no bilinear kernel (has_bilinear() is false)");
}

namespace raw {
namespace {

void check_taps(const LinearTaps& t, int64_t in, const char* what) {
  const size_t n = t.i0.size();
  MT_CHECK(n > 0 && t.i1.size() == n && t.l0.size() == n && t.l1.size() == n, "bilinear: the ", what,
           " taps must be four lists of one non-zero length");
  for (size_t i = 0; i < n; ++i)
    MT_CHECK(t.i0[i] >= 0 && t.i0[i] < in && t.i1[i] >= 0 && t.i1[i] < in, "bilinear: ", what, " tap ", i,
             " reads outside the input's ", in);
}

// x's shape with the last two dims replaced by (h, w).
Shape with_plane(const Shape& s, int64_t h, int64_t w) {
  Shape out = s;
  out[s.size() - 2] = h, out[s.size() - 1] = w;
  return out;
}

}  // namespace

bool bilinear_applies(const Tensor& x) {
  return x.dim() >= 3 && is_floating(x.dtype()) && backend(x.device()).has_bilinear();
}

Tensor bilinear(const Tensor& x, const LinearTaps& rows, const LinearTaps& cols) {
  MT_CHECK(bilinear_applies(x), "bilinear: needs a floating input of 3 dims or more on a backend with the kernel, got ",
           x.sizes(), " ", x.dtype(), " on ", x.device());
  const int64_t h = x.size(-2), w = x.size(-1), oh = static_cast<int64_t>(rows.i0.size());
  const int64_t ow = static_cast<int64_t>(cols.i0.size());
  check_taps(rows, h, "row");
  check_taps(cols, w, "column");
  const Tensor in = contiguous(x);
  Tensor out = empty(with_plane(x.sizes(), oh, ow), {.dtype = x.dtype(), .device = x.device()});
  const int64_t planes = x.numel() / (h * w);
  backend(x.device()).bilinear(view(out, {planes, oh, ow}), view(in, {planes, h, w}), rows, cols);
  return out;
}

Tensor bilinear_backward(const Tensor& dy, const LinearTaps& rows, const LinearTaps& cols, int64_t h, int64_t w) {
  const int64_t oh = static_cast<int64_t>(rows.i0.size()), ow = static_cast<int64_t>(cols.i0.size());
  MT_CHECK(bilinear_applies(dy) && dy.size(-2) == oh && dy.size(-1) == ow, "bilinear_backward: dy ", dy.sizes(),
           " must be floating, end in (", oh, ", ", ow, ") and be on a backend with the kernel");
  check_taps(rows, h, "row");
  check_taps(cols, w, "column");
  const Tensor g = contiguous(dy);
  Tensor dx = empty(with_plane(dy.sizes(), h, w), {.dtype = dy.dtype(), .device = dy.device()});
  const int64_t planes = dy.numel() / (oh * ow);
  backend(dy.device()).bilinear_backward(view(dx, {planes, h, w}), view(g, {planes, oh, ow}), rows, cols);
  return dx;
}

}  // namespace raw
}  // namespace mt
