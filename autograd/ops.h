// The differentiable ops of minitrain: free functions and operators on Tensor. Each one computes its
// result with a raw op (tensor/raw_ops.h) and, when grad mode is on and an input requires grad,
// records a Node whose backward is the op's chain rule (autograd/functions/*.cpp).
// The Tensor methods in tensor/tensor.h (x.sum(), x.view(...)) call these.
#pragma once

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/transformer_options.h"
#include "tensor/window.h"

namespace mt {

// ---- elementwise, broadcasting (NumPy rules) --------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // gradient goes to the larger (split on ties)
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor expm1(const Tensor& x);  // eˣ - 1, accurate near 0
Tensor log1p(const Tensor& x);  // ln(1 + x), accurate near 0
Tensor pow(const Tensor& x, double exponent);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  // differentiable in a and b
// A number on either side, as torch.where(cond, x, 0.0): it takes the tensor's dtype.
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);

// Comparisons: 1/0 in the promoted dtype; no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// ---- reductions (dims empty = all) ------------------------------------------------------------
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// (values, int64 indices) of the max/min along one dim, as torch.max(x, dim): the first index on
// ties, the first NaN if there is one; the gradient goes to that index only. x.max(dim) and
// x.min(dim) call these (Note [Max along a dim returns indices]).
std::tuple<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim = false);
// log Σ_dims exp(x), with each slice's max taken out first so nothing overflows (Note [Logsumexp shift]).
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Running sums along dim: y[..., i, ...] = Σ_{j <= i} x[..., j, ...] (autograd/functions/scan.cpp).
Tensor cumsum(const Tensor& x, int64_t dim);

// ---- linear algebra, softmax, indexing --------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x·wᵀ + b (b may be undefined). x: (..., in)  w: (out, in)  b: (out)
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// ---- views and copies -------------------------------------------------------------------------
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const Shape& order);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);
// Copies composed from index_select, narrow and cat (autograd/functions/reorder.cpp):
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);  // reverse the order along each of dims
// Shift along each dims[k] by shifts[k], wrapping around; no dims: roll the flattened x, keep its shape.
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
// (...) int64 class indices -> (..., num_classes) int64 with a 1 at each index; num_classes -1:
// max(indices) + 1. No gradient (autograd/functions/indexing.cpp).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// x tiled repeats[d] times along each dim, as torch's x.repeat(repeats); repeats may have more dims
// than x (new leading ones). Gradient: the sum over the copies.
Tensor repeat(const Tensor& x, const Shape& repeats);

// ---- sorting (autograd/functions/sort.cpp) ------------------------------------------------------
// (values, indices) as libtorch's: auto [values, indices] = sort(x, 1). The order is always stable
// (equal values keep their input order, PyTorch's stable=true) and NaN sorts above every number.
// values are differentiable (gather(x, dim, indices)); indices are int64 and are not.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The k largest (smallest when !largest) along dim, in sorted order, ties in input order.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// ---- joining, statistics, clamp: for convolutional networks (autograd/functions/join.cpp) -----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);  // equal shapes, new dim at `dim`
// Views along dim: pieces of split_size (the last one may be shorter), or of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// `chunks` pieces of ceil(n / chunks) (fewer when they run out), as torch.chunk.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
struct VarOptions {
  bool unbiased = true;  // divide by n - 1 (Bessel's correction), else by n
  bool keepdim = false;
};
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, VarOptions options = {});
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, VarOptions options = {});
// min(max(x, min), max); either bound may be absent. Gradient 1 inside [min, max], bounds included.
// min > max is allowed, as in PyTorch: the result is max everywhere, with gradient 0.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

// ---- sliding windows: convolution and pooling (autograd/functions/conv.cpp) --------------------
// (pad, interpolate, conv1d, conv_transpose2d and adaptive max pooling: autograd/spatial_ops.h)
// x: (N, C, H, W) -> (N, C·kh·kw, OH·OW), and back (summing overlaps), as F.unfold / F.fold.
Tensor unfold(const Tensor& x, const UnfoldOptions& options);
Tensor fold(const Tensor& x, Size2 output_size, const UnfoldOptions& options);
// x: (N, C, H, W)  w: (O, C/groups, kh, kw)  b: (O) or undefined  ->  (N, O, OH, OW)
// An unbatched (C, H, W) x gives (O, OH, OW), and the pooling ops below take one too, as PyTorch's.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const Conv2dOptions& options = {});
// (N, C, H, W) -> (N, C, OH, OW). The indices (int64, h·W + w within each plane) are not differentiable.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
// Batch normalisation with batch statistics (training mode), one node (autograd/functions/batch_norm.cpp):
// y = (x - mean)/√(var + eps)·weight + bias per channel (dim 1), var biased. x: (N, C, ...);
// weight, bias: (C) or undefined. When stats is given it receives the batch mean and biased var, (C),
// for the running statistics (nn/batchnorm.cpp).
struct BatchNormStats {
  Tensor mean, var;
};
Tensor batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        BatchNormStats* stats = nullptr);
// Group normalisation, as F.group_norm: x: (N, C, *) viewed as (N, G, (C/G)·Π*), each (n, g) row
// normalised by its mean and biased variance, then y = x̂·weight[c] + bias[c] per channel c.
// weight, bias: (C) or undefined (no scale, no shift); C must be divisible by num_groups. One fused
// node where the backend has the kernel (the CPU, float32 and float64), else the composition
// mt::reference::group_norm (autograd/functions/group_norm.cpp, Note [Group norm by a kernel]).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
// Batch normalisation, then ReLU, then max_pool2d(pool) when pool is set, as one node
// (autograd/functions/batch_norm_relu.cpp, Note [Fused batch norm, ReLU and pool]): the values and
// gradients of the composition max_pool2d(relu(batch_norm_train(x, ...))) (or of eval's affine form).
// Without running statistics: batch statistics, returned in *stats as batch_norm_train does; with them
// (eval): y = (x - running_mean)/√(running_var + eps)·weight + bias. x: (N, C, H, W).
struct BatchNormReluOptions {
  double eps = 1e-5;
  Tensor running_mean{}, running_var{};  // (C): fixed statistics (eval); undefined: the batch's
  std::optional<Pool2dOptions> pool{};   // the max pool after the ReLU
};
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const BatchNormReluOptions& options,
                       BatchNormStats* stats = nullptr);

// ---- operators --------------------------------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator-(double s, const Tensor& a) { return add(neg(a), s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }

}  // namespace mt

// ---- transformer ops (autograd/functions/transformer.cpp) -------------------------------------
// The fused ones keep their compositions beside them in autograd/detail/reference_ops.h.
namespace mt {

// Layer norm over the last dim, one fused node: y = (x - mean)/√(var + eps)·weight + bias, with the
// biased variance (÷n), like torch.nn.functional.layer_norm. x: (..., n)  weight, bias: (n), or
// undefined for no scale (1) or no shift (0), as F.layer_norm(x, shape).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// GELU, one fused node; formulas in tensor/detail/gelu_math.h.
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
// softmax(scale·q·kᵀ, masked to j <= i when causal)·v, one fused node; no (Tq, Tk) matrix is kept
// for the backward. q: (B, H, Tq, d)  k: (B, H, Tk, d)  v: (B, H, Tk, dv)  ->  (B, H, Tq, dv), or all
// without B: (H, T, ·). With attn_mask, or dv != d, it is composed from matmul and softmax instead
// (autograd/functions/attention.cpp). attn_mask broadcasts to (B, H, Tq, Tk): int64 is boolean,
// nonzero = may attend (PyTorch 1.13's True); floating is added to the scores (Note [Attention masks]).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    const AttentionOptions& options = {});
// Rows of weight: out[..., :] = weight[indices[...], :]. The gradient adds each output row back to
// its index's row (index_add), so a repeated index gets the sum of its rows' gradients.
// weight: (num, dim)  indices: (...) int64  ->  (..., dim)
Tensor embedding(const Tensor& weight, const Tensor& indices);
// x where mask is 0, value where it is not (mask broadcasts to x); no gradient flows to filled places.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// x with the elements above the diagonal-th diagonal of its last two dims zeroed (torch.tril).
Tensor tril(const Tensor& x, int64_t diagonal = 0);

}  // namespace mt
