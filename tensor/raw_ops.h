// Raw ops: the autograd-free tensor operations. Each checks its arguments (an error names the op,
// the shapes and the dtypes), applies NumPy broadcasting and dtype promotion, allocates the result
// and calls the device's Backend. autograd/ builds the differentiable ops on top of these; nothing
// in this file records history.
#pragma once

#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "tensor/window.h"

namespace mt::raw {

// ---- views (share storage) --------------------------------------------------------------------
Tensor as_strided(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset);
Tensor view(const Tensor& t, const Shape& shape);
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, const Shape& order);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim);
Tensor contiguous(const Tensor& t);
// Resolves one -1 in `shape` against numel; throws naming `op` when the sizes do not fit.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);

// ---- copies and fills -------------------------------------------------------------------------
Tensor clone(const Tensor& t);                      // contiguous copy
Tensor cast(const Tensor& t, DType dtype);          // itself when the dtype already matches
Tensor to_device(const Tensor& t, Device device);   // itself when already there
void copy_(const Tensor& dst, const Tensor& src);   // broadcasts src to dst, casts, bumps version
void fill_(const Tensor& dst, double value);        // bumps version

// ---- elementwise ------------------------------------------------------------------------------
Tensor unary(UnaryOp op, const Tensor& x, double scalar = 0.0);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// a = op(a, b) in place; b broadcasts to a's shape. Bumps a's version.
void binary_(BinaryOp op, const Tensor& a, const Tensor& b);
void unary_(UnaryOp op, const Tensor& a, double scalar);
// dst = op(src, scalar) into an existing tensor of src's shape and dtype: one pass, e.g. a copy that
// scales on the way (MulScalar). Bumps dst's version.
void unary_into(UnaryOp op, const Tensor& dst, const Tensor& src, double scalar);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- reductions -------------------------------------------------------------------------------
// dims empty = all dims.
Tensor reduce(ReductionOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const char* name);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);  // argmax of an order-reversed copy
// Sums a broadcast result back down to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ---------------------------------------------------------------------------
// 2-D (M,K)·(K,N), or batched (...,M,K)·(...,K,N) with broadcast batch dims; 1-D operands are
// promoted like torch.matmul (a vector on the left is a row, on the right a column) and the added
// dim is removed from the result.
Tensor matmul(const Tensor& a, const Tensor& b);
// aᵀ·b for 2-D a (K, M) and b (K, N): matmul(transpose(a, 0, 1), b) with aᵀ read in place, no
// transpose view made (a linear layer's weight gradient dyᵀ·x).
Tensor transposed_matmul(const Tensor& a, const Tensor& b);
// y = x·wᵀ + b, fused: the bias is written first and the GEMM accumulates onto it.
// x: (..., in)  w: (out, in)  b: (out) or undefined  ->  y: (..., out)
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// ---- softmax and indexing ---------------------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// The backward of index_select: zeros of `shape` with src added at index along dim.
Tensor index_add_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// int64 indices that sort x along dim, stably (Backend::argsort; tensor/raw_sort.cpp); with k >= 0
// only the first k of them (topk's), size k along dim.
Tensor argsort(const Tensor& x, int64_t dim, bool descending, int64_t k = -1);
// The backward of gather: zeros of `shape` with src scattered (added) at index along dim.
Tensor scatter_add_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);

// ---- random -----------------------------------------------------------------------------------
void uniform_(const Tensor& t, Generator& gen, double low = 0.0, double high = 1.0);
void normal_(const Tensor& t, Generator& gen, double mean = 0.0, double std = 1.0);

// ---- joining (tensor/raw_join.cpp) -------------------------------------------------------------
// Concatenation along dim: same rank, dtype and device, equal sizes in every other dim, except
// for the 1-D empty tensors it skips (Note [Cat skips 1-D empties] in tensor/raw_join.cpp).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// Skipped by cat: shape (0), 1-D and empty.
inline bool cat_skips(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }
// The tensor whose rank and other dims the rest of cat's inputs must match: the first one cat
// does not skip, or tensors[0] when it skips them all. tensors must not be empty.
const Tensor& cat_reference(const std::vector<Tensor>& tensors);

// ---- sliding windows: convolution and pooling (tensor/raw_conv.cpp) ---------------------------
// The geometry of a window over x's last two dims, checked: positive kernel, stride and dilation,
// padding >= 0, and an output of at least 1x1 (else "kernel larger than the padded input"). `op`
// names the caller in the error.
Window2d window2d(const Shape& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation, const char* op);
// x: (N, C, H, W) -> (N, C·kh·kw, OH·OW), as torch.nn.functional.unfold.
Tensor unfold(const Tensor& x, const UnfoldOptions& o);
// cols: (N, C·kh·kw, L) -> (N, C, H, W) = output_size, summing overlaps; the adjoint of unfold.
Tensor fold(const Tensor& cols, Size2 output_size, const UnfoldOptions& o);
// y = x ⋆ w + b.  x: (N, C, H, W)  w: (O, C/groups, kh, kw)  b: (O) or undefined  ->  y: (N, O, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o);
// The gradients of conv2d for the inputs asked for (the others are left undefined).
struct Conv2dGrads {
  Tensor dx, dw, db;
};
struct Conv2dNeeds {
  bool dx = true, dw = true, db = true;
};
Conv2dGrads conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dOptions& o,
                            Conv2dNeeds needs);
// The im2col + GEMM formulation for every layer (conv2d and conv2d_backward choose Winograd where
// winograd_applies; tests compare the two).
Tensor conv2d_im2col(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o);
Conv2dGrads conv2d_backward_im2col(const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dOptions& o,
                                   Conv2dNeeds needs);
// Winograd F(2x2, 3x3) (tensor/raw_winograd.cpp): 3x3, stride 1, no dilation or groups, padding <= 2,
// >= 16 input and output channels, on a backend with the transforms. x and w as conv2d's, checked.
bool winograd_applies(const Tensor& x, const Tensor& w, const Conv2dOptions& o);
Tensor conv2d_winograd(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o);
// dx of conv2d for dy (N, O, OH, OW): the convolution of dy with w rotated, by Winograd.
Tensor conv2d_input_grad_winograd(const Tensor& dy, const Tensor& w, const Conv2dOptions& o);
// dw of conv2d for dy (N, O, OH, OW) and x: the adjoint of the Winograd forward in w.
Tensor conv2d_weight_grad_winograd(const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dOptions& o);
// Running sums along dim (tensor/raw_scan.cpp): y[..., i, ...] = Σ_{j <= i} x[..., j, ...], or
// Σ_{j >= i} when reverse. x at least 1-D; any dtype the backend sums.
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse = false);
// Bilinear resampling of the last two dims by the backend's kernel (tensor/raw_interpolate.cpp), when
// bilinear_applies: x floating, 3-D or more, on a backend with has_bilinear(). x: (..., H, W) ->
// (..., OH, OW), OH = rows' size, OW = cols'; bilinear_backward: dy (..., OH, OW) -> dx (..., h, w).
bool bilinear_applies(const Tensor& x);
Tensor bilinear(const Tensor& x, const LinearTaps& rows, const LinearTaps& cols);
Tensor bilinear_backward(const Tensor& dy, const LinearTaps& rows, const LinearTaps& cols, int64_t h, int64_t w);
// Max pooling with the argmax of each window: indices[n, c, oh, ow] = h·W + w within x[n, c].
struct MaxPool2dResult {
  Tensor out, indices;  // (N, C, OH, OW); indices int64
};
MaxPool2dResult max_pool2d(const Tensor& x, const Pool2dOptions& o);
// The options with stride 0 replaced by the kernel size (PyTorch's stride=None).
Pool2dOptions resolve_pool(const Pool2dOptions& o);

}  // namespace mt::raw

// ---- transformer kernels (tensor/raw_transformer.cpp) -----------------------------------------
namespace mt::raw {

// Layer norm over the last dim (formulas: Backend::layer_norm in tensor/backend.h).
// x: (..., n)  weight, bias: (n) or undefined (1 and 0)  ->  out: (..., n), and mean, rstd: (...)
// for the backward. The backward returns dweight and dbias even for an undefined weight or bias.
struct LayerNormResult {
  Tensor out, mean, rstd;
};
LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd);
// Group norm over (N, C, *) (formulas: Backend::group_norm; tensor/raw_group_norm.cpp), for
// group_norm_applies(x): x float32 or float64, 2-D or more, on a backend with has_group_norm().
// x: (N, C, *)  weight, bias: (C) or undefined (1 and 0)  ->  out like x, mean and rstd: (N, G).
// The backward returns dweight and dbias even for an undefined weight or bias.
bool group_norm_applies(const Tensor& x);
struct GroupNormResult {
  Tensor out, mean, rstd;
};
GroupNormResult group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps);
struct GroupNormGrads {
  Tensor dx, dweight, dbias;
};
GroupNormGrads group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd);

// GELU(x) and dy·GELU'(x), elementwise.
Tensor gelu(const Tensor& x, GeluApproximate approximate);
Tensor gelu_backward(const Tensor& dy, const Tensor& x, GeluApproximate approximate);

// softmax(scale·q·kᵀ (causal: j <= i)) · v, fused: no (Tq, Tk) matrix is materialised.
// q: (B, H, Tq, d)  k, v: (B, H, Tk, d)  ->  out: (B, H, Tq, d), lse: (B, H, Tq) (log Σ e^{s}, for the backward;
// float32 for 16-bit q, k, v).
// Operands with a unit last stride (per-head views of a fused qkv projection) are read in place.
struct AttentionResult {
  Tensor out, lse;
};
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& options);
AttentionParams attention_params(const Tensor& q, const AttentionOptions& options);
struct AttentionGrads {
  Tensor dq, dk, dv;
};
AttentionGrads scaled_dot_product_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                                     const AttentionParams& params);

// (rows, cols) int64: 1 where j <= i + diagonal (torch.ones(rows, cols).tril(diagonal)), else 0.
Tensor tril_mask(int64_t rows, int64_t cols, int64_t diagonal, Device device);

}  // namespace mt::raw
