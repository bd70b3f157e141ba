// Convolution over the whole batch (tensor/detail/raw_conv_batched.h): the formulas of raw_conv.cpp, with
// the batch and the groups folded into one GEMM batch index b = n·groups + g (B = N·groups):
//   cols        = im2col(x)                       (N, groups·K, L) = (B, K, L), one launch
//   y[b]        = w[g] · cols[b]                  (Og, K)·(K, L) -> (Og, L);  y (N, O, L) = (B, Og, L)
//   dcols[b]    = w[g]ᵀ · dy[b]                   (K, Og)·(Og, L) -> (K, L);  dx = col2im(dcols), one launch
//   dw[g]       = Σ_n dy[b] · cols[b]ᵀ            a batched GEMM into (N, groups, Og, K), then a sum over n
//   db          = Σ_{n, l} dy[n, :, l]
// Each GEMM is one CudaBackend::gemm call, that is one cublasGemmStridedBatchedEx over B matrices.
// A pointwise kernel (1x1, stride 1, no padding) skips im2col/col2im: x already is its columns.
//
// Note [Whole-batch columns]: the column buffer holds the whole batch, N·groups·K·L elements
// (kh·kw times the size of x: 58 MB for a batch of 64 at 32 channels, 3x3, 28x28, in float32),
// where the per-sample loop needs one sample's. That is GPU memory bought for N times fewer
// launches. The backward recomputes it from x rather than keeping the forward's, as the loop does.
#include "tensor/detail/raw_conv_batched.h"

namespace mt::raw::detail {
namespace {

// B = N·groups matrices of t, each (rows, cols) at b·batch_stride, row-major or column-major.
Tensor matrices(const Tensor& t, int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols, bool col_major) {
  return as_strided(t, Shape{batch, rows, cols}, col_major ? Shape{batch_stride, 1, rows} : Shape{batch_stride, cols, 1},
                    t.storage_offset());
}

bool is_pointwise(const Window2d& w) {
  return w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 && w.stride_w == 1 && w.pad_h == 0 && w.pad_w == 0;
}

// w[g] for every b = n·groups + g, as (B, Og, K) row-major with batch stride `stride`: with one group
// the same matrix for every b (stride 0, no copy); with more, the (groups, Og, K) weight repeated N
// times (N·O·K elements, small next to the columns).
struct BatchedWeight {
  Tensor w;
  int64_t stride;
};
BatchedWeight batched_weight(const Tensor& w, const ConvDims& d) {
  if (d.groups == 1) return {w, 0};
  const Tensor repeated = contiguous(expand(view(w, Shape{1, d.groups, d.og, d.k}), Shape{d.n, d.groups, d.og, d.k}));
  return {repeated, d.og * d.k};
}

// The columns of x: (N, groups·K, L), from one im2col launch, or x itself for a pointwise kernel.
Tensor columns(const Tensor& x, const ConvDims& d, const TensorOptions& like) {
  if (is_pointwise(d.w)) return x;
  Tensor cols = empty(Shape{d.n, d.groups * d.k, d.l}, like);
  backend(x.device()).im2col(cols, x, d.w);
  return cols;
}

}  // namespace

bool conv_runs_batched(Device device) { return device.is_cuda(); }

Tensor conv2d_batched(const Tensor& x, const Tensor& w, const Tensor& b, const ConvDims& d) {
  Backend& be = backend(x.device());
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  Tensor y = empty(Shape{d.n, d.o, d.w.out_h(), d.w.out_w()}, like);
  if (y.numel() == 0) return y;
  const int64_t batch = d.n * d.groups;
  const Tensor cols = columns(x, d, like);
  const BatchedWeight wb = batched_weight(w, d);
  if (b.defined()) be.copy(view(y, Shape{d.n, d.o, d.l}), expand(view(b, Shape{1, d.o, 1}), Shape{d.n, d.o, d.l}));
  // y[b] (Og, L) (+)= w[g] (Og, K) · cols[b] (K, L)
  be.gemm(view(y, Shape{batch, d.og, d.l}), matrices(wb.w, batch, wb.stride, d.og, d.k, false),
          matrices(cols, batch, d.k * d.l, d.k, d.l, false), /*accumulate=*/b.defined());
  return y;
}

Conv2dGrads conv2d_backward_batched(const Tensor& dy, const Tensor& x, const Tensor& w, const ConvDims& d,
                                    Conv2dNeeds needs) {
  Backend& be = backend(x.device());
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  const int64_t batch = d.n * d.groups;
  const bool pointwise = is_pointwise(d.w);
  const Tensor dy_b = matrices(dy, batch, d.og * d.l, d.og, d.l, false);  // dy[b] (Og, L)
  Conv2dGrads r;
  if (needs.db) r.db = sum(dy, {0, 2, 3});
  Tensor cols;  // im2col(x) for dw, then the buffer of dcols
  if (needs.dw && d.n == 0) {
    r.dw = zeros(w.sizes(), like);  // an empty sum
  } else if (needs.dw) {
    cols = columns(x, d, like);
    // per[b] (Og, K) = dy[b] (Og, L) · cols[b]ᵀ (L, K), the transpose a column-major view
    Tensor per = empty(Shape{batch, d.og, d.k}, like);
    be.gemm(per, dy_b, matrices(cols, batch, d.k * d.l, d.l, d.k, /*col_major=*/true), /*accumulate=*/false);
    r.dw = view(sum(view(per, Shape{d.n, d.o * d.k}), {0}), w.sizes());  // dw = Σ_n per[n]
  }
  if (needs.dx) {
    r.dx = empty(x.sizes(), like);
    // dcols[b] (K, L) = w[g]ᵀ (K, Og) · dy[b] (Og, L): into dx itself for a pointwise kernel, else
    // into the columns' buffer (the dw GEMM before it on the stream has read them)
    if (pointwise) cols = r.dx;
    else if (!cols.defined()) cols = empty(Shape{d.n, d.groups * d.k, d.l}, like);
    const BatchedWeight wb = batched_weight(w, d);
    be.gemm(matrices(cols, batch, d.k * d.l, d.k, d.l, false), matrices(wb.w, batch, wb.stride, d.k, d.og, true),
            dy_b, /*accumulate=*/false);
    if (!pointwise) be.col2im(r.dx, cols, d.w);  // dx = col2im(dcols), one launch
  }
  return r;
}

}  // namespace mt::raw::detail
