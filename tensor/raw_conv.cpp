// Raw ops: sliding windows. unfold/fold (im2col/col2im), conv2d and its backward as im2col
// plus batched GEMMs, and max pooling with argmax indices. Shapes and geometry are checked here; the
// device kernels (Backend::im2col, col2im, max_pool2d, gemm) trust them.
//
// Convolution as a GEMM, per group g (C = groups·Cg input channels, O = groups·Og outputs,
// K = Cg·kh·kw, L = OH·OW):
//   cols = im2col(x)                        (N, groups·K, L)
//   y[n, g]  = w[g] · cols[n, g]            (Og, K)·(K, L) -> (Og, L), + b[g] broadcast over L
//   dcols[n, g] = w[g]ᵀ · dy[n, g]          (K, Og)·(Og, L) -> (K, L);   dx = col2im(dcols)
//   dw[g]    = Σ_n dy[n, g] · cols[n, g]ᵀ   (Og, L)·(L, K) -> (Og, K)
//   db       = Σ_{n, l} dy[n, :, l]
// The backward recomputes cols instead of saving it from the forward: cols is kh·kw times the size
// of x, and im2col is cheap next to the GEMMs.
#include "tensor/raw_ops.h"

namespace mt::raw {

namespace {

// A (B, rows, cols) matrix batch read from t's storage at `offset` with the given strides.
Tensor batch_view(const Tensor& t, int64_t b, int64_t rows, int64_t cols, const Shape& strides, int64_t offset) {
  return as_strided(t, Shape{b, rows, cols}, strides, t.storage_offset() + offset);
}

void check_4d(const Tensor& x, const char* op, const char* what) {
  MT_CHECK(x.dim() == 4, op, ": ", what, " must be 4-D (N, C, H, W), got shape ", x.sizes());
  MT_CHECK(is_floating(x.dtype()), op, ": needs a floating dtype, got ", x.dtype());
}

}  // namespace

Window2d window2d(const Shape& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation, const char* op) {
  MT_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel size must be positive, got ", kernel);
  MT_CHECK(stride.h > 0 && stride.w > 0, op, ": stride must be positive, got ", stride);
  MT_CHECK(dilation.h > 0 && dilation.w > 0, op, ": dilation must be positive, got ", dilation);
  MT_CHECK(padding.h >= 0 && padding.w >= 0, op, ": padding must be non-negative, got ", padding);
  const int n = x.size();
  Window2d w{.in_h = x[n - 2], .in_w = x[n - 1], .kernel_h = kernel.h, .kernel_w = kernel.w,
             .stride_h = stride.h, .stride_w = stride.w, .pad_h = padding.h, .pad_w = padding.w,
             .dilation_h = dilation.h, .dilation_w = dilation.w};
  const Size2 reach{dilation.h * (kernel.h - 1) + 1, dilation.w * (kernel.w - 1) + 1};
  const Size2 padded{w.in_h + 2 * padding.h, w.in_w + 2 * padding.w};
  MT_CHECK(reach.h <= padded.h && reach.w <= padded.w, op, ": kernel ", kernel, " (", reach,
           " with dilation) is larger than the padded input ", padded, " (input ", Size2(w.in_h, w.in_w),
           " of shape ", x, ", padding ", padding, ")");
  return w;
}

// ---- unfold / fold ----------------------------------------------------------------------------

Tensor unfold(const Tensor& x, const UnfoldOptions& o) {
  check_4d(x, "unfold", "input");
  const Window2d w = window2d(x.sizes(), o.kernel_size, o.stride, o.padding, o.dilation, "unfold");
  const int64_t n = x.size(0), c = x.size(1);
  Tensor cols = empty(Shape{n, c * w.kernel_h * w.kernel_w, w.out_h() * w.out_w()},
                      {.dtype = x.dtype(), .device = x.device()});
  if (cols.numel() > 0) backend(x.device()).im2col(cols, contiguous(x), w);
  return cols;
}

Tensor fold(const Tensor& cols, Size2 output_size, const UnfoldOptions& o) {
  MT_CHECK(cols.dim() == 3, "fold: input must be 3-D (N, C·kh·kw, L), got shape ", cols.sizes());
  MT_CHECK(is_floating(cols.dtype()), "fold: needs a floating dtype, got ", cols.dtype());
  const int64_t kk = o.kernel_size.h * o.kernel_size.w;
  MT_CHECK(kk > 0 && cols.size(1) % kk == 0, "fold: dim 1 of the input ", cols.sizes(),
           " must be a multiple of the kernel's ", o.kernel_size, " = ", kk, " taps");
  const Shape x_shape{cols.size(0), cols.size(1) / kk, output_size.h, output_size.w};
  const Window2d w = window2d(x_shape, o.kernel_size, o.stride, o.padding, o.dilation, "fold");
  MT_CHECK(cols.size(2) == w.out_h() * w.out_w(), "fold: input ", cols.sizes(), " has ", cols.size(2),
           " blocks, but an output of ", output_size, " with these options has ", w.out_h(), "x", w.out_w());
  Tensor x = empty(x_shape, {.dtype = cols.dtype(), .device = cols.device()});
  if (x.numel() > 0) backend(cols.device()).col2im(x, contiguous(cols), w);
  return x;
}

// ---- conv2d -----------------------------------------------------------------------------------

namespace {

struct ConvDims {
  int64_t n, c, o, groups, cg, og, k, l;
  Window2d w;
};

ConvDims conv_dims(const Tensor& x, const Tensor& wt, const Conv2dOptions& o) {
  check_4d(x, "conv2d", "input");
  MT_CHECK(wt.dim() == 4, "conv2d: weight must be 4-D (O, C/groups, kh, kw), got shape ", wt.sizes());
  MT_CHECK(x.dtype() == wt.dtype() && x.device() == wt.device(), "conv2d: input (", x.dtype(), ", ",
           x.device(), ") and weight (", wt.dtype(), ", ", wt.device(), ") differ in dtype or device");
  MT_CHECK(o.groups > 0 && x.size(1) % o.groups == 0 && wt.size(0) % o.groups == 0, "conv2d: groups = ",
           o.groups, " must divide the input channels ", x.size(1), " and the output channels ", wt.size(0));
  MT_CHECK(wt.size(1) * o.groups == x.size(1), "conv2d: input of shape ", x.sizes(), " has ", x.size(1),
           " channels, but the weight ", wt.sizes(), " with groups = ", o.groups, " expects ",
           wt.size(1) * o.groups);
  const Window2d w = window2d(x.sizes(), {wt.size(2), wt.size(3)}, o.stride, o.padding, o.dilation, "conv2d");
  const int64_t cg = x.size(1) / o.groups;
  return {x.size(0), x.size(1), wt.size(0), o.groups, cg, wt.size(0) / o.groups,
          cg * w.kernel_h * w.kernel_w, w.out_h() * w.out_w(), w};
}

// Makes a (groups, N, rows, L) result laid out as (N, groups·rows, L), copying only when groups > 1.
Tensor groups_to_channels(const Tensor& per_group, const ConvDims& d, int64_t rows) {
  if (d.groups == 1) return view(per_group, Shape{d.n, rows, d.l});
  return view(contiguous(permute(per_group, Shape{1, 0, 2, 3})), Shape{d.n, d.groups * rows, d.l});
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& wt, const Tensor& b, const Conv2dOptions& o) {
  const ConvDims d = conv_dims(x, wt, o);
  if (b.defined())
    MT_CHECK(b.dim() == 1 && b.size(0) == d.o && b.dtype() == x.dtype(), "conv2d: bias ", b.sizes(),
             " must be (", d.o, ") of dtype ", x.dtype());
  Backend& be = backend(x.device());
  const Tensor cols = unfold(x, {.kernel_size = {d.w.kernel_h, d.w.kernel_w}, .dilation = o.dilation,
                                 .padding = o.padding, .stride = o.stride});
  const Tensor w = contiguous(wt);
  Tensor y = empty(Shape{d.groups, d.n, d.og, d.l}, {.dtype = x.dtype(), .device = x.device()});
  for (int64_t g = 0; g < d.groups; ++g) {
    // y[g]: (N, Og, L)  w[g] shared by every n (batch stride 0): (N, Og, K)  cols[:, g]: (N, K, L)
    const Tensor y_g = batch_view(y, d.n, d.og, d.l, Shape{d.og * d.l, d.l, 1}, g * d.n * d.og * d.l);
    if (b.defined()) be.copy(y_g, expand(view(narrow(b, 0, g * d.og, d.og), Shape{1, d.og, 1}), y_g.sizes()));
    const Tensor w_g = batch_view(w, d.n, d.og, d.k, Shape{0, d.k, 1}, g * d.og * d.k);
    const Tensor cols_g = batch_view(cols, d.n, d.k, d.l, Shape{d.groups * d.k * d.l, d.l, 1}, g * d.k * d.l);
    if (y_g.numel() > 0) be.gemm(y_g, w_g, cols_g, /*accumulate=*/b.defined());
  }
  return view(groups_to_channels(y, d, d.og), Shape{d.n, d.o, d.w.out_h(), d.w.out_w()});
}

Conv2dGrads conv2d_backward(const Tensor& dy_in, const Tensor& x, const Tensor& wt, const Conv2dOptions& o,
                            Conv2dNeeds needs) {
  const ConvDims d = conv_dims(x, wt, o);
  Backend& be = backend(x.device());
  const Tensor dy = contiguous(dy_in);  // (N, O, OH, OW) = (N, groups, Og, L)
  const UnfoldOptions uo{.kernel_size = {d.w.kernel_h, d.w.kernel_w}, .dilation = o.dilation,
                         .padding = o.padding, .stride = o.stride};
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  const int64_t dy_n = d.o * d.l;  // dy's stride between samples
  Conv2dGrads r;
  if (needs.db) r.db = sum(dy, {0, 2, 3});
  if (needs.dw) {
    const Tensor cols = unfold(x, uo);  // (N, groups·K, L)
    r.dw = empty(wt.sizes(), like);     // (O, Cg, kh, kw) = (groups, Og, K)
    for (int64_t g = 0; g < d.groups; ++g) {
      const Tensor dw_g = batch_view(r.dw, 1, d.og, d.k, Shape{0, d.k, 1}, g * d.og * d.k);
      if (d.n == 0) be.fill(dw_g, 0.0);
      for (int64_t n = 0; n < d.n; ++n) {
        // dw[g] += dy[n, g] (Og, L) · cols[n, g]ᵀ (L, K): the transpose is a column-major view
        const Tensor dy_ng = batch_view(dy, 1, d.og, d.l, Shape{0, d.l, 1}, n * dy_n + g * d.og * d.l);
        const Tensor cols_t = batch_view(cols, 1, d.l, d.k, Shape{0, 1, d.l}, (n * d.groups + g) * d.k * d.l);
        be.gemm(dw_g, dy_ng, cols_t, /*accumulate=*/n > 0);
      }
    }
  }
  if (needs.dx) {
    const Tensor w = contiguous(wt);
    Tensor dcols = empty(Shape{d.groups, d.n, d.k, d.l}, like);
    for (int64_t g = 0; g < d.groups; ++g) {
      // dcols[g]: (N, K, L) = w[g]ᵀ (K, Og), shared, column-major · dy[:, g] (N, Og, L)
      const Tensor dcols_g = batch_view(dcols, d.n, d.k, d.l, Shape{d.k * d.l, d.l, 1}, g * d.n * d.k * d.l);
      const Tensor w_t = batch_view(w, d.n, d.k, d.og, Shape{0, 1, d.k}, g * d.og * d.k);
      const Tensor dy_g = batch_view(dy, d.n, d.og, d.l, Shape{dy_n, d.l, 1}, g * d.og * d.l);
      if (dcols_g.numel() > 0) be.gemm(dcols_g, w_t, dy_g, /*accumulate=*/false);
    }
    r.dx = fold(groups_to_channels(dcols, d, d.k), {d.w.in_h, d.w.in_w}, uo);
  }
  return r;
}

// ---- pooling ----------------------------------------------------------------------------------

Pool2dOptions resolve_pool(const Pool2dOptions& o) {
  Pool2dOptions r = o;
  if (r.stride.h == 0) r.stride.h = o.kernel_size.h;
  if (r.stride.w == 0) r.stride.w = o.kernel_size.w;
  return r;
}

MaxPool2dResult max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_4d(x, "max_pool2d", "input");
  const Pool2dOptions o = resolve_pool(options);
  const Window2d w = window2d(x.sizes(), o.kernel_size, o.stride, o.padding, o.dilation, "max_pool2d");
  // PyTorch's rule; it also guarantees every window holds at least one real element.
  MT_CHECK(2 * o.padding.h <= o.kernel_size.h && 2 * o.padding.w <= o.kernel_size.w, "max_pool2d: padding ",
           o.padding, " must be at most half the kernel size ", o.kernel_size);
  const int64_t n = x.size(0), c = x.size(1);
  const Shape planes{n * c, w.out_h(), w.out_w()};
  Tensor out = empty(planes, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(planes, {.dtype = kInt64, .device = x.device()});
  if (out.numel() > 0)
    backend(x.device()).max_pool2d(out, indices, view(contiguous(x), Shape{n * c, w.in_h, w.in_w}), w);
  const Shape shape{n, c, w.out_h(), w.out_w()};
  return {view(out, shape), view(indices, shape)};
}

}  // namespace mt::raw
