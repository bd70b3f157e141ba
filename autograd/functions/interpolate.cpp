// interpolate (nearest, bilinear). Nearest is composed from index_select, so it runs on every backend
// and its backward is index_select's (index_add: every output adds its gradient back to the input it
// read). Bilinear is one node over the backend's bilinear kernel where the backend has one (the CPU's,
// tensor/cpu/cpu_interpolate.cpp), and the same composition elsewhere, which is also its reference
// (mt::reference::interpolate; Note [Bilinear by a kernel]). Both modes are separable: the H and W
// passes run one after the other, each one index_select per source tap. The source positions are
// PyTorch 1.13's (aten/src/ATen/native/UpSample.h), computed on the host once per call:
//   nearest    src = min(floor(dst·s), in - 1) in float, s = 1/scale_factor or in/out; the index
//              itself when out = in, and dst/2 when out = 2·in
//   bilinear   real = s·dst (align_corners, s = (in-1)/(out-1)) or max(s·(dst + ½) - ½, 0) (s as for
//              nearest, in double); i0 = floor(real), i1 = i0 + 1 below the last row, λ1 = real - i0,
//              y = (1 - λ1)·x[i0] + λ1·x[i1]; the identity when out = in without align_corners
// The W pass runs first, so y = λh0·(λw0·x00 + λw1·x01) + λh1·(λw0·x10 + λw1·x11), PyTorch's order.
//
// Note [Bilinear by a kernel]: the composition makes four output-sized temporaries a pass and its
// backward two index_adds a pass: about twice libtorch's time when issue 40's ops were measured. The
// kernel reads the four taps of each output once and its adjoint writes each input row once per
// output row that reads it. The CUDA backend has no such kernel and runs the composition; the tests
// compare the two (tests/autograd/test_gradcheck_spatial.cpp) and each with PyTorch.
#include <cmath>

#include "autograd/detail/reference_ops.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "autograd/spatial_ops.h"
#include "tensor/raw_ops.h"

namespace mt {

namespace {

std::vector<int64_t> nearest_sources(int64_t in, int64_t out, double scale_factor) {
  std::vector<int64_t> src(out);
  const float s = scale_factor > 0 ? static_cast<float>(1.0 / scale_factor) : static_cast<float>(in) / out;
  for (int64_t i = 0; i < out; ++i) {
    if (out == in) src[i] = i;
    else if (out == 2 * in) src[i] = i >> 1;
    else src[i] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(i) * s)), in - 1);
  }
  return src;
}

LinearTaps linear_taps(int64_t in, int64_t out, double scale_factor, bool align_corners) {
  LinearTaps t;
  double s;
  if (align_corners) s = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  else s = scale_factor > 0 ? 1.0 / scale_factor : static_cast<double>(in) / static_cast<double>(out);
  for (int64_t i = 0; i < out; ++i) {
    if (out == in && !align_corners) {
      t.i0.push_back(i), t.i1.push_back(i), t.l0.push_back(1.0), t.l1.push_back(0.0);
      continue;
    }
    const double at = static_cast<double>(i);
    const double real = align_corners ? s * at : std::max(s * (at + 0.5) - 0.5, 0.0);
    const int64_t i0 = static_cast<int64_t>(real);
    const double l1 = real - static_cast<double>(i0);
    t.i0.push_back(i0), t.i1.push_back(i0 + (i0 < in - 1 ? 1 : 0)), t.l0.push_back(1.0 - l1), t.l1.push_back(l1);
  }
  return t;
}

Tensor index(const std::vector<int64_t>& v, Device device) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = kInt64, .device = device});
}

// λ along dim d of a 4-D tensor, shaped to broadcast: (1, 1, n, 1) or (1, 1, 1, n).
Tensor weights(const std::vector<double>& v, int d, const Tensor& like) {
  Shape s{1, 1, 1, 1};
  s[d] = static_cast<int64_t>(v.size());
  return cast(from_vector(v, s, {.dtype = kFloat64, .device = like.device()}), like.dtype());
}

Tensor linear_pass(const Tensor& x, int d, const LinearTaps& t) {
  const Tensor a = index_select(x, d, index(t.i0, x.device()));
  const Tensor b = index_select(x, d, index(t.i1, x.device()));
  return a * weights(t.l0, d, x) + b * weights(t.l1, d, x);
}

// y = bilinear(x)   =>   dx = bilinear's adjoint applied to dy (the backend's kernel)
struct BilinearBackward final : Node {
  LinearTaps rows, cols;
  int64_t h = 0, w = 0;
  TensorList apply(TensorList&& g) override { return {raw::bilinear_backward(g[0], rows, cols, h, w)}; }
  std::string name() const override { return "BilinearBackward"; }
};

Tensor bilinear_kernel(const Tensor& x, LinearTaps rows, LinearTaps cols) {
  Tensor y = raw::bilinear(x, rows, cols);
  if (auto node = detail::record<BilinearBackward>({&x})) {
    node->h = x.size(2), node->w = x.size(3), node->rows = std::move(rows), node->cols = std::move(cols);
    detail::set_history(y, node);
  }
  return y;
}

Tensor interpolate_impl(const Tensor& x, const InterpolateOptions& o, bool kernel) {
  MT_CHECK(x.dim() == 4, "interpolate: input must be 4-D (N, C, H, W), got shape ", x.sizes());
  MT_CHECK(is_floating(x.dtype()), "interpolate: needs a floating dtype, got ", x.dtype());
  const bool by_size = o.size.h > 0 || o.size.w > 0, by_scale = o.scale_factor.h > 0 || o.scale_factor.w > 0;
  MT_CHECK(by_size != by_scale, "interpolate: give exactly one of size and scale_factor");
  MT_CHECK(!o.align_corners || o.mode == InterpolateMode::Bilinear,
           "interpolate: align_corners applies to bilinear mode only");
  const int64_t h = x.size(2), w = x.size(3);
  Size2 out = o.size;
  const Scale2 scale = by_scale ? o.scale_factor : Scale2(0.0);
  if (by_scale) {
    MT_CHECK(o.scale_factor.h > 0 && o.scale_factor.w > 0, "interpolate: scale_factor must be positive, got (",
             o.scale_factor.h, ", ", o.scale_factor.w, ")");
    out = {static_cast<int64_t>(std::floor(static_cast<double>(h) * scale.h)),
           static_cast<int64_t>(std::floor(static_cast<double>(w) * scale.w))};
  }
  MT_CHECK(out.h > 0 && out.w > 0 && h > 0 && w > 0, "interpolate: input ", x.sizes(), " and output size ", out,
           " must be non-empty");
  if (o.mode == InterpolateMode::Nearest) {
    const Tensor rows = index_select(x, 2, index(nearest_sources(h, out.h, scale.h), x.device()));
    return index_select(rows, 3, index(nearest_sources(w, out.w, scale.w), x.device()));
  }
  LinearTaps rows = linear_taps(h, out.h, scale.h, o.align_corners), cols = linear_taps(w, out.w, scale.w, o.align_corners);
  if (kernel && raw::bilinear_applies(x)) return bilinear_kernel(x, std::move(rows), std::move(cols));
  return linear_pass(linear_pass(x, 3, cols), 2, rows);
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) { return interpolate_impl(x, options, true); }

Tensor reference::interpolate(const Tensor& x, const InterpolateOptions& options) {
  return interpolate_impl(x, options, false);
}

}  // namespace mt
