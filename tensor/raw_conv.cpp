// Raw ops: sliding windows. unfold/fold (im2col/col2im), conv2d and its backward as im2col
// plus GEMMs, and max pooling with argmax indices. Shapes and geometry are checked here; the
// device kernels (Backend::im2col, col2im, max_pool2d, gemm) trust them.
//
// Convolution as a GEMM, per group g (C = groups·Cg input channels, O = groups·Og outputs,
// K = Cg·kh·kw, L = OH·OW):
//   cols[n] = im2col(x[n])                  (groups·K, L)
//   y[n, g]  = w[g] · cols[n, g]            (Og, K)·(K, L) -> (Og, L), + b[g] broadcast over L
//   dcols[n, g] = w[g]ᵀ · dy[n, g]          (K, Og)·(Og, L) -> (K, L);   dx[n] = col2im(dcols[n])
//   dw[g]    = Σ_n dy[n, g] · cols[n, g]ᵀ   (Og, L)·(L, K) -> (Og, K)
//   db       = Σ_{n, l} dy[n, :, l]
// one sample at a time (Note [Convolution one sample at a time]), skipping im2col/col2im for
// pointwise (1x1) kernels. conv2d and conv2d_backward take Winograd F(2x2, 3x3) instead for 3x3
// stride-1 layers with enough channels (tensor/raw_winograd.cpp); the im2col forms stay callable
// (conv2d_im2col, conv2d_backward_im2col), as the reference the tests compare Winograd against.
// The backward recomputes cols instead of saving it from the forward: saved for the whole batch,
// cols would be kh·kw times the size of x, and im2col costs a fraction of the GEMMs (about 8 of
// 46 ms in bench/conv.sh's forward before Winograd took that layer).
#include "tensor/detail/raw_conv_batched.h"
#include "tensor/raw_ops.h"
#include "tensor/detail/raw_split.h"

namespace mt::raw {

namespace {

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

using detail::ConvDims;

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

// One (rows, cols) matrix of t at element `offset` past t's own offset, stored row-major
// (col_major = false) or column-major (a transposed view), as a GEMM batch of one.
Tensor matrix(const Tensor& t, int64_t rows, int64_t cols, int64_t offset, bool col_major = false) {
  return as_strided(t, Shape{1, rows, cols}, col_major ? Shape{0, 1, rows} : Shape{0, cols, 1},
                    t.storage_offset() + offset);
}

// The bytes of one sample's columns buffer, for for_items (none for a pointwise conv).
int64_t columns_bytes(const ConvDims& d, DType dtype, bool pointwise) {
  return pointwise ? 0 : d.groups * d.k * d.l * static_cast<int64_t>(element_size(dtype));
}

// A pointwise convolution (1x1 kernel, stride 1, no padding) needs no im2col: x[n] viewed as
// (C, H·W) already is its columns, and col2im of the column gradient is the identity.
bool is_pointwise(const Window2d& w) {
  return w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 && w.stride_w == 1 && w.pad_h == 0 && w.pad_w == 0;
}

}  // namespace

// Note [Convolution one sample at a time]: the loops below run im2col, the GEMMs and col2im for one
// sample n before the next, into one (groups·K, L) column buffer. The buffer (K·L floats: 1.8 MB for
// a 64-channel 3x3 layer at 28x28) stays in cache between the im2col that writes it and the GEMM
// that reads it, where a whole-batch buffer (N times larger) would go out to memory and back; and
// per sample, y[n, g] and dy[n, g] are dense (Og, L) blocks, so groups need no layout copies. The
// GEMMs keep their full size (M = Og, N = L, K = Cg·kh·kw), which OpenBLAS runs at its peak rate.
// On CUDA the whole batch goes at once instead (tensor/detail/raw_conv_batched.h): one launch per op, not N.
Tensor conv2d_im2col(const Tensor& x_in, const Tensor& wt, const Tensor& b, const Conv2dOptions& o) {
  const ConvDims d = conv_dims(x_in, wt, o);
  if (b.defined())
    MT_CHECK(b.dim() == 1 && b.size(0) == d.o && b.dtype() == x_in.dtype(), "conv2d: bias ", b.sizes(),
             " must be (", d.o, ") of dtype ", x_in.dtype());
  if (detail::conv_runs_batched(x_in.device())) return detail::conv2d_batched(contiguous(x_in), contiguous(wt), b, d);
  Backend& be = backend(x_in.device());
  const TensorOptions like{.dtype = x_in.dtype(), .device = x_in.device()};
  const Tensor x = contiguous(x_in), w = contiguous(wt);  // x: (N, C, H, W)  w: (groups, Og, K)
  Tensor y = empty(Shape{d.n, d.o, d.w.out_h(), d.w.out_w()}, like);
  if (y.numel() == 0) return y;
  // One sample's columns (groups·K, L): a buffer im2col fills, or x itself for a pointwise conv.
  // Samples run on the threads (Note [Samples on the threads], tensor/detail/raw_split.h), each with its
  // own buffer.
  const bool pointwise = is_pointwise(d.w);
  const Tensor bias = b.defined() ? expand(view(b, Shape{d.o, 1}), Shape{d.o, d.l}) : Tensor();
  for_items(d.n, columns_bytes(d, x.dtype(), pointwise), [&](int64_t n) {
    const Tensor cols = pointwise ? x : empty(Shape{1, d.groups * d.k, d.l}, like);
    if (!pointwise) be.im2col(cols, narrow(x, 0, n, 1), d.w);
    const int64_t cols_n = pointwise ? n * d.c * d.l : 0;
    const int64_t y_n = n * d.o * d.l;
    if (b.defined()) be.copy(as_strided(y, Shape{d.o, d.l}, Shape{d.l, 1}, y.storage_offset() + y_n), bias);  // y[n] = b, then +=
    for (int64_t g = 0; g < d.groups; ++g) {
      // y[n, g] (Og, L) (+)= w[g] (Og, K) · cols[g] (K, L)
      be.gemm(matrix(y, d.og, d.l, y_n + g * d.og * d.l), matrix(w, d.og, d.k, g * d.og * d.k),
              matrix(cols, d.k, d.l, cols_n + g * d.k * d.l), /*accumulate=*/b.defined());
    }
  });
  return y;
}

// Note [Low-precision convolution]: bfloat16 and float16 convolutions sum in float32 and round each
// result once (Note [Low-precision compute type]), without a float32 copy of x, w or dy. im2col
// copies one sample's 16-bit columns exactly, and the GEMMs widen them panel by panel (Note
// [Low-precision GEMM in tiles]). The forward's GEMM rounds y[n] once (onto the 16-bit bias, which
// is exact in float32). Two backward sums run past one GEMM, and keep float32 between them: dw sums
// its samples into a float32 partial (the GEMM's 16-bit-in, float32-out form, tensor/backend.h),
// rounded after the last; dx's column gradient stays float32 through col2im into a float32 sample,
// rounded once into dx[n]. The float32 buffers are one sample's (or one weight's), never the batch's.
// Winograd is not used (winograd_applies): its transforms would round in 16 bits between steps.
Conv2dGrads conv2d_backward_im2col(const Tensor& dy_in, const Tensor& x_in, const Tensor& wt,
                                   const Conv2dOptions& o, Conv2dNeeds needs) {
  const ConvDims d = conv_dims(x_in, wt, o);
  // x is read only for dw: for dx alone it gives the shape, and may be a broadcast placeholder
  // (conv_transpose2d's forward, autograd/functions/conv_transpose.cpp), never copied.
  const Tensor x = needs.dw ? contiguous(x_in) : x_in;
  if (detail::conv_runs_batched(x_in.device()))
    return detail::conv2d_backward_batched(contiguous(dy_in), x, contiguous(wt), d, needs);
  Backend& be = backend(x_in.device());
  const TensorOptions like{.dtype = x_in.dtype(), .device = x_in.device()};
  // Where sums that span several GEMMs live: float32 for the 16-bit dtypes, else the dtype itself.
  const bool lowp = is_low_precision(x_in.dtype());
  const TensorOptions sums{.dtype = lowp ? kFloat32 : x_in.dtype(), .device = x_in.device()};
  const Tensor dy = contiguous(dy_in);  // (N, O, OH, OW) = (N, groups, Og, L)
  const Tensor w = contiguous(wt);
  Conv2dGrads r;
  if (needs.db) r.db = sum(dy, {0, 2, 3});
  if (needs.dx) r.dx = empty(x.sizes(), like);
  if (!needs.dw && !needs.dx) return r;
  if (needs.dw && d.n == 0) r.dw = zeros(wt.sizes(), like);
  if (d.n == 0) return r;
  // dw: (O, Cg, kh, kw) = (groups, Og, K), summed over the samples in strands (Note [Samples on the
  // threads], tensor/detail/raw_split.h): strand k's first sample writes partial[k], the rest add to it.
  const Strands strands(d.n, needs.dw ? wt.numel() * static_cast<int64_t>(element_size(sums.dtype)) : 0);
  const Tensor partial = needs.dw ? empty(Shape{strands.count, wt.numel()}, sums) : Tensor();
  // im2col(x[n]) for dw, then dcols[n] for dx, in one buffer per strand; pointwise: x[n] and dx[n].
  // 16-bit: dcols and the sample's dx in float32 buffers of their own (Note [Low-precision convolution]).
  const bool pointwise = is_pointwise(d.w);
  const bool dx_sums = lowp && needs.dx && !pointwise;
  const int64_t strand_bytes = columns_bytes(d, x.dtype(), pointwise) +
                               (dx_sums ? columns_bytes(d, kFloat32, false) + d.c * d.w.in_h * d.w.in_w * 4 : 0);
  for_items(strands.count, strand_bytes, [&](int64_t k) {
    const Tensor cols = pointwise ? Tensor() : empty(Shape{1, d.groups * d.k, d.l}, like);
    const Tensor dcols = dx_sums ? empty(Shape{1, d.groups * d.k, d.l}, sums) : cols;
    const Tensor dx_n = dx_sums ? empty(Shape{1, d.c, d.w.in_h, d.w.in_w}, sums) : Tensor();
    for (int64_t n = strands.first(k); n < strands.first(k + 1); ++n) {
      const int64_t dy_n = n * d.o * d.l, x_n = pointwise ? n * d.c * d.l : 0;
      if (needs.dw) {
        if (!pointwise) be.im2col(cols, narrow(x, 0, n, 1), d.w);
        const Tensor& xcols = pointwise ? x : cols;
        const int64_t dw_k = k * wt.numel();
        for (int64_t g = 0; g < d.groups; ++g) {
          // dw[g] (Og, K) (+)= dy[n, g] (Og, L) · cols[g]ᵀ (L, K), the transpose a column-major view
          be.gemm(matrix(partial, d.og, d.k, dw_k + g * d.og * d.k), matrix(dy, d.og, d.l, dy_n + g * d.og * d.l),
                  matrix(xcols, d.l, d.k, x_n + g * d.k * d.l, /*col_major=*/true),
                  /*accumulate=*/n > strands.first(k));
        }
      }
      if (needs.dx) {
        const Tensor& dc = pointwise ? r.dx : dcols;
        for (int64_t g = 0; g < d.groups; ++g) {
          // dcols[g] (K, L) = w[g]ᵀ (K, Og) · dy[n, g] (Og, L)
          be.gemm(matrix(dc, d.k, d.l, x_n + g * d.k * d.l),
                  matrix(w, d.k, d.og, g * d.og * d.k, /*col_major=*/true), matrix(dy, d.og, d.l, dy_n + g * d.og * d.l),
                  /*accumulate=*/false);
        }
        if (dx_sums) {  // float32 col2im, then dx[n] rounded once
          be.col2im(dx_n, dcols, d.w);
          be.copy(narrow(r.dx, 0, n, 1), dx_n);
        } else if (!pointwise) {
          be.col2im(narrow(r.dx, 0, n, 1), cols, d.w);  // dx[n] = col2im(dcols)
        }
      }
    }
  });
  if (needs.dw) r.dw = reshape(cast(strands.total(partial), wt.dtype()), wt.sizes());
  return r;
}

// A 3x3 stride-1 layer with enough channels takes Winograd F(2x2, 3x3) for the forward and both
// gradients (tensor/raw_winograd.cpp); every other layer im2col + GEMM.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const ConvDims d = conv_dims(x, w, o);
  if (!winograd_applies(x, w, o) || d.n * d.o * d.l == 0) return conv2d_im2col(x, w, b, o);
  MT_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == d.o && b.dtype() == x.dtype()), "conv2d: bias ",
           b.sizes(), " must be (", d.o, ") of dtype ", x.dtype());
  return conv2d_winograd(x, w, b, o);
}

Conv2dGrads conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dOptions& o,
                            Conv2dNeeds needs) {
  const ConvDims d = conv_dims(x, w, o);
  if (!winograd_applies(x, w, o) || d.n * d.c * d.l == 0) return conv2d_backward_im2col(dy, x, w, o, needs);
  const Shape dy_shape{d.n, d.o, d.w.out_h(), d.w.out_w()};
  MT_CHECK(dy.sizes() == dy_shape && dy.dtype() == x.dtype(), "conv2d_backward: the output gradient ", dy.sizes(),
           " (", dy.dtype(), ") must have the output's shape ", dy_shape, " and dtype ", x.dtype());
  Conv2dGrads r;
  if (needs.db) r.db = sum(dy, {0, 2, 3});
  if (needs.dw) r.dw = conv2d_weight_grad_winograd(dy, x, w, o);
  if (needs.dx) r.dx = conv2d_input_grad_winograd(dy, w, o);
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
  Window2d w = window2d(x.sizes(), o.kernel_size, o.stride, o.padding, o.dilation, "max_pool2d");
  w.ceil_mode = o.ceil_mode;
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
