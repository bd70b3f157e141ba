// Backend: the primitive kernels one device type must provide. Everything else (broadcasting,
// dtype promotion, shape checks, views, composite ops like linear or softmax's backward) is written
// once in tensor/raw_ops.cpp and autograd/ on top of these.
//
// Contract for every method: all tensors are on this backend's device; shapes and dtypes were
// checked by raw_ops.cpp; `out` tensors are freshly allocated and contiguous unless a comment says
// otherwise. Inputs may be strided (including stride 0 from broadcasting) unless a comment says
// otherwise. Backends for asynchronous devices (CUDA) only enqueue work; `synchronize` waits.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/transformer_options.h"

namespace mt {

class Generator;

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, Abs, Sign, Erf,
  Expm1,      // eˣ - 1, exact near 0 where exp(x) - 1 cancels
  Log1p,      // ln(1 + x), exact near 0 where log(1 + x) rounds 1 + x first
  Pow,        // x^scalar
  AddScalar,  // x + scalar
  MulScalar,  // x * scalar
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Maximum, Minimum,
  Eq, Ne, Lt, Le, Gt, Ge,  // 1 or 0 in the inputs' dtype
};

// A reduction over dims. Named so that nothing else in view through minitrain.h shares the name:
// a collective's op is mt::dist::ReduceOp, a loss's reduction mt::nn::Reduction, and a program that
// writes `using namespace mt; using namespace mt::dist;` (or mt::nn) must not find two.
enum class ReductionOp : uint8_t { Sum, Max, Min, ArgMax };

// The geometry of a 2-D sliding window (convolution, pooling) over one (H, W) plane: what im2col,
// col2im and max_pool2d agree on. Output size per dim: (in + 2·pad - dilation·(kernel-1) - 1)/stride + 1,
// rounded down, or up with ceil_mode (Note [Pooling ceil_mode]).
struct Window2d {
  int64_t in_h = 0, in_w = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  bool ceil_mode = false;
  int64_t out_h() const { return out_size(in_h, kernel_h, stride_h, pad_h, dilation_h); }
  int64_t out_w() const { return out_size(in_w, kernel_w, stride_w, pad_w, dilation_w); }

  // Note [Pooling ceil_mode]: with ceil_mode the division rounds up, so a last window that overhangs
  // the padded input still counts, and the kernels treat its overhang like padding (0 in im2col,
  // skipped by max_pool2d). PyTorch's rule then drops a last window that would start past the input
  // and its left padding, in the right padding: it would hold no element of the input.
  int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) const {
    const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;  // >= 0 once raw::window2d checked it
    int64_t out = (ceil_mode ? span + stride - 1 : span) / stride + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad) --out;
    return out;
  }
};

// Linear interpolation along one dim, as bilinear resampling reads it: output position i takes
// l0[i]·in[i0[i]] + l1[i]·in[i1[i]]. The caller (interpolate) computes the taps; every index < the input size.
struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<double> l0, l1;
};

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(ReductionOp op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator() = 0;

  // dst[i] = cast(src[i]). Same shape; both may be strided; dtypes may differ. dst may be a view
  // of an existing tensor (in-place copy_). For a device backend one side may be on the CPU: that
  // is how tensors move between host and device (raw::to_device asks the device's backend).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  // dst[i] = value; dst may be a strided view.
  virtual void fill(const Tensor& dst, double value) = 0;

  // out[i] = op(in[i], scalar). Same shape and dtype; out may alias in (in-place ops).
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) = 0;
  // out[i] = op(a[i], b[i]). a and b are already expanded to out's shape and cast to out's dtype;
  // out may alias a (in-place ops) and may be a strided view.
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out[i] = cond[i] != 0 ? a[i] : b[i]. All expanded to out's shape; a, b have out's dtype.
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;

  // Reduces `in` over the dims whose bit is set in dim_mask. out has in's rank, size 1 on reduced
  // dims. Sum/Max/Min keep in's dtype; ArgMax writes int64 (index along the single reduced dim,
  // first occurrence; ArgMax gets exactly one bit). Max/Min/ArgMax propagate NaN like PyTorch.
  virtual void reduce(ReductionOp op, const Tensor& out, const Tensor& in, uint32_t dim_mask) = 0;

  // out = a·b (+ out when accumulate). out: (B, M, N) contiguous; a: (B, M, K); b: (B, K, N).
  // a and b each have unit stride in one of their last two dims (row- or column-major matrices);
  // B may have any stride, including 0 (a shared matrix). a, b and out share a dtype, except that
  // out may be float32 under bfloat16 or float16 a and b: the float32 sums, not rounded to 16 bits
  // (Note [Low-precision convolution] sums them further).
  virtual void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) = 0;

  // Softmax (or log-softmax) over the last dim. in and out contiguous, same shape.
  virtual void softmax(const Tensor& out, const Tensor& in, bool log) = 0;

  // The four index ops get 3-D (outer, n, inner) views around the indexed dim (raw_linalg.cpp makes
  // them), so a backend handles one layout whatever the tensors' rank.
  // in: (outer, n, inner) contiguous; index: int64 (k) contiguous; out: (outer, k, inner).
  // Indices were bounds-checked on the host only when cheap (CPU); backends check too.
  virtual void index_select(const Tensor& out, const Tensor& in, const Tensor& index) = 0;
  // The backward of index_select: out(outer, n, inner) += src(outer, k, inner) at index. out is
  // contiguous and pre-filled; repeated indices accumulate.
  virtual void index_add(const Tensor& out, const Tensor& index, const Tensor& src) = 0;
  // in, index, out: (outer, n_in|k, inner) contiguous; out[o,j,i] = in[o, index[o,j,i], i].
  virtual void gather(const Tensor& out, const Tensor& in, const Tensor& index) = 0;
  // The backward of gather: out[o, index[o,j,i], i] += src[o,j,i]. out contiguous, pre-filled.
  virtual void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) = 0;
  // scatter_add into zeros: out is written whole (uninitialised before). A backend may zero and
  // scatter each task's part while it is in cache (CPU: max pooling's backward, plane by plane).
  virtual void scatter_add_zeros(const Tensor& out, const Tensor& index, const Tensor& src) {
    fill(out, 0.0);
    scatter_add(out, index, src);
  }
  // Stable argsort of each row (tensor/raw_sort.cpp makes the layout): indices[r, :] are the first k
  // positions of the order of x[r, :], ascending (descending: reversed comparison), equal values in
  // their input order, NaN larger than every number (first when descending), as PyTorch's sort.
  // k < n is topk's, which need not order the rest. x: (rows, n) contiguous floating or int64;
  // indices: (rows, k) int64 contiguous, k <= n, overwritten.
  virtual void argsort(const Tensor& indices, const Tensor& x, bool descending) = 0;
  // Running sums along the middle dim (tensor/raw_scan.cpp): out[o, i, j] = Σ_{i' <= i} in[o, i', j], or
  // Σ_{i' >= i} when reverse. in, out: (outer, n, inner) contiguous, out overwritten. Not pure: the
  // default composes it from copy and binary in ⌈log₂ n⌉ passes (Note [Cumsum by doubling]); the CPU
  // overrides it with one pass.
  virtual void cumsum(const Tensor& out, const Tensor& in, bool reverse);

  // Random fills of a contiguous floating tensor, drawing from gen (and advancing it).
  virtual void uniform(const Tensor& out, Generator& gen, double low, double high) = 0;
  virtual void normal(const Tensor& out, Generator& gen, double mean, double std) = 0;

  // ---- transformer kernels (tensor/raw_transformer.cpp calls them) ---------------------------------
  // Layer normalisation over the last dim (Ba et al., 2016), per row r of x: (rows, n):
  //   mean[r] = Σx/n,  rstd[r] = 1/√(Σ(x - mean)²/n + eps),  out = (x - mean)·rstd·weight + bias
  // x, out: (rows, n)  weight, bias: (n)  mean, rstd: (rows), kept for the backward. All contiguous.
  virtual void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps) = 0;
  // With x̂ = (x - mean)·rstd and g = dy·weight:
  //   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dweight = Σ_rows dy·x̂,  dbias = Σ_rows dy
  // dx, dy, x: (rows, n)  dweight, dbias: (n), overwritten. All contiguous.
  virtual void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd) = 0;
  // out = GELU(x) and dx = dy·GELU'(x), elementwise over contiguous tensors of one shape.
  virtual void gelu(const Tensor& out, const Tensor& x, GeluApproximate approximate) = 0;
  virtual void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, GeluApproximate approximate) = 0;
  // Scaled dot-product attention, per (batch b, head h, query i):
  //   s_j = scale·q_i·k_j (j <= i when causal),  p = softmax(s),  out_i = Σ_j p_j v_j,  lse_i = log Σ_j e^{s_j}
  // q: (B, H, Tq, d)  k, v: (B, H, Tk, d), any strides with a unit last stride (so the per-head views
  // of a fused qkv projection need no copy); out: (B, H, Tq, d) and lse: (B, H, Tq) contiguous;
  // lse is float32 for bfloat16 and float16 q, k, v (Note [Low-precision attention]).
  virtual void attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionParams& params) = 0;
  // The backward, recomputing p_ij = exp(s_ij - lse_i) instead of keeping the (Tq, Tk) matrix:
  //   D_i = dout_i·out_i,  dp_ij = dout_i·v_j,  ds_ij = p_ij·(dp_ij - D_i)
  //   dq_i = scale·Σ_j ds_ij k_j,  dk_j = scale·Σ_i ds_ij q_i,  dv_j = Σ_i p_ij dout_i
  // dout: like out (unit last stride); dq, dk, dv: contiguous, shaped like q, k, v, overwritten.
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                  const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const AttentionParams& params) = 0;
  // ---- sliding windows (convolution, pooling; tensor/raw_conv.cpp) -----------------------------
  // im2col: cols[n, (c·kh + i)·kw + j, oh·OW + ow] = x[n, c, oh·sh - ph + i·dh, ow·sw - pw + j·dw],
  // 0 where that position is padding. x: (N, C, H, W) contiguous; cols: (N, C·kh·kw, OH·OW).
  virtual void im2col(const Tensor& cols, const Tensor& x, const Window2d& w) = 0;
  // col2im, the adjoint of im2col: x[n, c, h, w] = Σ of the cols entries im2col would read from
  // (n, c, h, w); padding entries are dropped. cols: (N, C·kh·kw, OH·OW) contiguous; x: (N, C, H, W),
  // written whole (not accumulated into).
  virtual void col2im(const Tensor& x, const Tensor& cols, const Window2d& w) = 0;
  // Max over each window, padding counting as -inf: out[p, oh, ow] and indices[p, oh, ow] = h·W + w of
  // the first maximum in its plane (NaN wins, like PyTorch). x: (P, H, W) contiguous, P = N·C planes;
  // out: (P, OH, OW) in x's dtype; indices: (P, OH, OW) int64. Every window holds at least one input
  // element (raw_conv.cpp checks pad <= kernel/2).
  virtual void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) = 0;
  // Winograd F(2x2, 3x3) transforms of a 3x3, stride-1 convolution (Note [Winograd F(2x2, 3x3)] in
  // tensor/raw_winograd.cpp). Optional: a backend without them answers false to has_winograd and its
  // conv2d stays im2col + GEMM. Tiles: TH = ceil(OH/2), TW = ceil(OW/2), T = S·TH·TW over S samples.
  //   winograd_input:  v[ξ, c, (s·TH + th)·TW + tw] = (Bᵀ·d·B)[ξ], d the 4x4 patch of x[s, c] with its
  //                    top-left at (2·th - ph, 2·tw - pw), zero outside. x: (S, C, H, W) contiguous;
  //                    v: (16, C, T); w: the window (kernel 3x3, stride 1, dilation 1).
  //   winograd_output: y[s, o, 2·th + a, 2·tw + b] = (Aᵀ·m·A)[a, b] (+ bias[o]) where it lies inside y,
  //                    m[ξ] = m[ξ, o, tile]. m: (16, O, T) contiguous; y: (S, O, OH, OW); bias (O) or undefined.
  //   winograd_output_backward, winograd_output's adjoint without the bias: m[:, o, tile] = A·e·Aᵀ for
  //                    the 2x2 tile e of dy[s, o] (zero past OH, OW). dy: (S, O, OH, OW) contiguous; m: (16, O, T).
  virtual bool has_winograd() const { return false; }
  virtual void winograd_input(const Tensor& v, const Tensor& x, const Window2d& w);
  virtual void winograd_output(const Tensor& y, const Tensor& m, const Tensor& bias);
  virtual void winograd_output_backward(const Tensor& m, const Tensor& dy);
  // Bilinear resampling of (P, H, W) planes to (P, OH, OW) and its adjoint (tensor/raw_interpolate.cpp):
  //   out[p, i, j] = λr0[i]·(λc0[j]·x[p, r0[i], c0[j]] + λc1[j]·x[p, r0[i], c1[j]]) + λr1[i]·(the same at r1[i])
  // with rows = {r0, r1, λr0, λr1} (OH entries each) and cols alike (OW). x, out, dx, dy contiguous;
  // bilinear_backward writes dx whole. Optional: a backend without them answers false to has_bilinear
  // and interpolate stays a composition of index_select passes (autograd/functions/interpolate.cpp).
  virtual bool has_bilinear() const { return false; }
  virtual void bilinear(const Tensor& out, const Tensor& x, const LinearTaps& rows, const LinearTaps& cols);
  virtual void bilinear_backward(const Tensor& dx, const Tensor& dy, const LinearTaps& rows, const LinearTaps& cols);
  // Group normalisation (Wu and He, 2018; tensor/raw_group_norm.cpp), per sample n and group g, over
  // the D = (C/G)·S values of x[n, channels of g, :]:
  //   mean[n, g] = Σx/D,  rstd[n, g] = 1/√(Σ(x - mean)²/D + eps),  out = (x - mean)·rstd·weight[c] + bias[c]
  // and the backward, with x̂ = (x - mean)·rstd and g = dy·weight[c], each mean over the D values:
  //   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dweight[c] = Σ_{n,s} dy·x̂,  dbias[c] = Σ_{n,s} dy
  // x, out, dx, dy: (N, C, S)  weight, bias, dweight, dbias: (C)  mean, rstd: (N, G), G dividing C.
  // All contiguous, outputs overwritten. Optional: a backend without them answers false to
  // has_group_norm and group_norm stays a composition (autograd/functions/group_norm.cpp).
  virtual bool has_group_norm() const { return false; }
  virtual void group_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps);
  virtual void group_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                   const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd);
  // Batch normalisation fused with the ReLU after it, and the max pool after that when `pool` is given
  // (tensor/raw_batch_norm.cpp; Note [Fused batch norm, ReLU and pool] in autograd/functions/batch_norm_relu.cpp).
  // Per channel c of x: (N, C, L) contiguous, over its n = N·L values:
  //   batch_norm_stats:  mean[c] = Σ x / n,  var[c] = Σ (x - mean[c])² / n (biased); (C) each, in x's dtype.
  //   batch_norm_relu:   y = max((x - mean[c])·scale[c] + shift[c], 0), NaN kept as ReLU keeps it;
  //                      out = y (N, C, L), or, with pool (L = in_h·in_w, windows inside the plane: no
  //                      padding, dilation or overhang), max_pool2d(y) (N, C, OH·OW) with indices as
  //                      max_pool2d writes them.
  //   batch_norm_relu_backward, with dy = dout routed back through the pool's indices and masked where
  //   out = 0 (ReLU's), x̂ = (x - mean)·inv:  dbias = Σ dy,  dweight = Σ dy·x̂  (C) each, and
  //                      dx = scale·(dy - x̂·dweight/n - dbias/n)  with batch statistics,
  //                      dx = scale·dy                            with fixed ones (eval).
  // mean, inv, scale, shift: (C) contiguous in x's dtype; indices int64. Optional: a backend without them
  // answers false to has_batch_norm_relu and batch_norm_relu stays the composition of its ops.
  virtual bool has_batch_norm_relu() const { return false; }
  virtual void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x);
  virtual void batch_norm_relu(const Tensor& out, const Tensor& indices, const Tensor& x, const Tensor& mean,
                               const Tensor& scale, const Tensor& shift, const Window2d* pool);
  virtual void batch_norm_relu_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                        const Tensor& dout, const Tensor& out, const Tensor& indices, const Tensor& x,
                                        const Tensor& mean, const Tensor& inv, const Tensor& scale,
                                        const Window2d* pool, bool batch_stats);

  // Waits for queued work (no-op on CPU).
  virtual void synchronize() {}
};

// The backend of a device; throws a clear error for a device type this build does not have.
Backend& backend(Device device);
// The library behind the CPU backend's GEMM: "Eigen" or "OpenBLAS", the build's default or what
// MT_GEMM=eigen|openblas asks for (Note [Which GEMM] in cmake/Dependencies.cmake). Throws mt::Error
// on a malformed MT_GEMM, or on MT_GEMM=openblas in a build without OpenBLAS.
const char* cpu_gemm_library();
// Called once by a backend's translation unit (the CUDA one registers itself when built).
void register_backend(DeviceType type, Backend* backend);

}  // namespace mt
