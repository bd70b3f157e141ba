// Raw ops: 3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3), the forward and the
// input gradient, for backends that have the two transforms (Backend::has_winograd; the CPU one,
// tensor/cpu/cpu_winograd.cpp), and the weight gradient as that algorithm's adjoint. raw_conv.cpp
// picks this over im2col + GEMM where winograd_applies says so. Not here: other kernel sizes, strides, dilation
// or groups, and larger tiles (F(4x4, 3x3) saves more multiplications but loses float32 accuracy).
//
// Note [Winograd F(2x2, 3x3)]: after Lavin and Gray, "Fast Algorithms for Convolutional Neural
// Networks", 2015. A 2x2 tile of a 3x3 convolution's output, read off a 4x4 patch d of the input, is
//   y = Aᵀ·[(G·g·Gᵀ) ⊙ (Bᵀ·d·B)]·A          g: the 3x3 kernel,  ⊙: elementwise over the 4x4 domain
//   Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1]   Aᵀ = [1 1 1 0; 0 1 -1 -1]
// 16 multiplications per tile and channel pair instead of 36. Summed over the input channels, the
// elementwise product becomes 16 independent GEMMs, one per domain position ξ = (i, j):
//   u[ξ] = (G·w[o, c]·Gᵀ)[ξ]            (16, O, C)       once per call
//   v[ξ] = (Bᵀ·d[c, tile]·B)[ξ]          (16, C, T)       T tiles (backend: winograd_input)
//   m[ξ] = u[ξ]·v[ξ]                     (16, O, T)       one batched GEMM, 2.25x fewer flops than im2col's
//   y[o, tile] = Aᵀ·m[:, o, tile]·A     (+ bias)        (backend: winograd_output)
// The input gradient of a stride-1 convolution is itself one: dx = dy ⋆ w' with padding 2 - p, where
// w'[c, o] is w[o, c] rotated by 180 degrees. The rotation folds into the weight transform:
// G·(J·g·J)·Gᵀ = (G·J)·g·(G·J)ᵀ with J the exchange matrix, so G's columns are reversed.
// The weight gradient is the adjoint of the forward in w, step by step backwards:
//   m'[ξ, o, tile] = (A·dy[o, tile]·Aᵀ)[ξ]      (backend: winograd_output_backward)
//   du[ξ] = Σ_tiles m'[ξ]·v[ξ]ᵀ                 (16, O, C): one batched GEMM per sample group, accumulated
//   dw[o, c] = Gᵀ·du[:, o, c]·G                 (transform_weight_backward)
// Accuracy: the transforms add and subtract a few inputs (the ½ in G is exact), so the result differs
// from im2col's by rounding only (about 1e-6 relative in float32; tests/tensor/test_winograd.cpp).
// Threads: the sample groups are the items of Note [Samples on the threads] (tensor/detail/raw_split.h):
// with enough of them, whole groups run on the threads, each group's three steps one after the
// other on one core; the weight gradient sums its groups' products in strands.
#include <algorithm>

#include "tensor/raw_ops.h"
#include "tensor/detail/raw_split.h"

namespace mt {

void Backend::winograd_input(const Tensor&, const Tensor&, const Window2d&) {
  MT_CHECK(false, "winograd_input: this backend has no Winograd kernels (has_winograd() is false)");
}
void Backend::winograd_output(const Tensor&, const Tensor&, const Tensor&) {
  MT_CHECK(false, "winograd_output: this backend has no Winograd kernels (has_winograd() is false)");
}
void Backend::winograd_output_backward(const Tensor&, const Tensor&) {
  MT_CHECK(false, "winograd_output_backward: this backend has no Winograd kernels (has_winograd() is false)");
}

namespace raw {
namespace {

// Tiles per GEMM: samples are grouped until their tiles reach this count, so the 16 GEMMs stay large
// enough for OpenBLAS (a 14x14 output has only 49 tiles a sample) while v and m (16·C·T and 16·O·T
// values) stay near the cache.
constexpr int64_t kTilesPerGemm = 256;

// G (4, 3) of Note [Winograd F(2x2, 3x3)], or G·J (its columns reversed: the rotated kernel's).
Tensor g_matrix(const Tensor& like, bool reversed) {
  const std::vector<double> g = reversed ? std::vector<double>{0, 0, 1, 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 1, 0, 0}
                                         : std::vector<double>{1, 0, 0, 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 0, 0, 1};
  return cast(from_vector(g, Shape{4, 3}, {.device = like.device()}), like.dtype());
}

// u (16, rows, cols) from w (O, C, 3, 3): u[ξ = 4a + b, o, c] = (G·w[o, c]·Gᵀ)[a, b] for the forward
// (rows = O, cols = C), or of w[o, c] rotated (G's columns reversed) with the channels swapped for
// the input gradient (rows = C, cols = O).
Tensor transform_weight(const Tensor& w, bool for_input_grad) {
  const int64_t o = w.size(0), c = w.size(1);
  const Tensor gt = transpose(g_matrix(w, for_input_grad), 0, 1);  // Gᵀ (3, 4)
  // rows of w·Gᵀ: (O·C·3, 3)·(3, 4) -> t[oc, i, b];  then (t per oc)ᵀ·Gᵀ: (O·C·4, 3)·(3, 4) -> [oc, b, a]
  const Tensor t = view(matmul(reshape(contiguous(w), Shape{o * c * 3, 3}), gt), Shape{o * c, 3, 4});
  const Tensor u = view(matmul(reshape(contiguous(transpose(t, 1, 2)), Shape{o * c * 4, 3}), gt), Shape{o, c, 4, 4});
  // [o, c, b, a] -> [a, b, o, c] (forward) or [a, b, c, o] (input gradient)
  const Tensor ordered = contiguous(permute(u, for_input_grad ? Shape{3, 2, 1, 0} : Shape{3, 2, 0, 1}));
  return view(ordered, Shape{16, for_input_grad ? c : o, for_input_grad ? o : c});
}

// transform_weight's adjoint (forward form): dw[o, c] = Gᵀ·du[:, o, c]·G, du (16, O, C) -> (O, C, 3, 3).
Tensor transform_weight_backward(const Tensor& du) {
  const int64_t o = du.size(1), c = du.size(2);
  const Tensor g = g_matrix(du, false);  // (4, 3)
  // [a, b, o, c] -> [oc, a, b]; rows·G: (O·C·4, 4)·(4, 3) -> [oc, a, j]; (per oc)ᵀ·G -> [oc, j, i]
  const Tensor per_oc = contiguous(permute(view(du, Shape{4, 4, o, c}), Shape{2, 3, 0, 1}));
  const Tensor t = view(matmul(view(per_oc, Shape{o * c * 4, 4}), g), Shape{o * c, 4, 3});
  const Tensor dw = view(matmul(reshape(contiguous(transpose(t, 1, 2)), Shape{o * c * 3, 4}), g), Shape{o, c, 3, 3});
  return contiguous(transpose(dw, 2, 3));  // [o, c, j, i] -> [o, c, i, j]
}

int64_t tiles_of(const Window2d& w) { return ((w.out_h() + 1) / 2) * ((w.out_w() + 1) / 2); }

// Samples per group: enough for kTilesPerGemm tiles, at least one, at most the batch.
int64_t group_of(int64_t n, int64_t tiles) {
  return std::clamp<int64_t>(kTilesPerGemm / tiles, 1, std::max<int64_t>(n, 1));
}

// The bytes of one sample group's v (16, C, T) and m (16, O, T), for for_items.
int64_t group_bytes(const Tensor& x, int64_t c, int64_t o, int64_t tiles) {
  return 16 * (c + o) * tiles * static_cast<int64_t>(element_size(x.dtype()));
}

// y (N, rows of u, OH, OW) = the convolution of x (N, cols of u, H, W) whose transformed kernel is u,
// over the window w (3x3, stride 1), sample group by sample group (Note [Winograd F(2x2, 3x3)]).
Tensor winograd_conv(const Tensor& x, const Tensor& u, const Tensor& bias, const Window2d& w) {
  Backend& be = backend(x.device());
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  const int64_t n = x.size(0), c = x.size(1), o = u.size(1);
  Tensor y = empty(Shape{n, o, w.out_h(), w.out_w()}, like);
  const int64_t tiles = tiles_of(w), group = group_of(n, tiles);
  for_items((n + group - 1) / group, group_bytes(x, c, o, group * tiles), [&](int64_t g) {
    const int64_t s0 = g * group, s = std::min(group, n - s0);
    const Tensor v = empty(Shape{16, c, s * tiles}, like), m = empty(Shape{16, o, s * tiles}, like);
    be.winograd_input(v, narrow(x, 0, s0, s), w);
    be.gemm(m, u, v, /*accumulate=*/false);  // m[ξ] (O, T) = u[ξ] (O, C) · v[ξ] (C, T)
    be.winograd_output(narrow(y, 0, s0, s), m, bias);
  });
  return y;
}

// dw (O, C, 3, 3) of the convolution of x (N, C, H, W) over w (3x3, stride 1) whose output gradient
// is dy (N, O, OH, OW): the adjoint of winograd_conv in the weight, du[ξ] = Σ_groups m[ξ]·v[ξ]ᵀ with
// m = A·dy·Aᵀ per tile, then dw = Gᵀ·du·G; strand k adds its groups into partial[k].
Tensor winograd_weight_grad(const Tensor& dy, const Tensor& x, const Window2d& w) {
  Backend& be = backend(x.device());
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  const int64_t n = x.size(0), c = x.size(1), o = dy.size(1);
  const int64_t tiles = tiles_of(w), group = group_of(n, tiles), groups = (n + group - 1) / group;
  const Strands strands(groups, 16 * o * c * static_cast<int64_t>(element_size(x.dtype())));
  const Tensor partial = empty(Shape{strands.count, 16, o, c}, like);
  for_items(strands.count, group_bytes(x, c, o, group * tiles), [&](int64_t k) {
    const Tensor du = view(narrow(partial, 0, k, 1), Shape{16, o, c});
    for (int64_t g = strands.first(k); g < strands.first(k + 1); ++g) {
      const int64_t s0 = g * group, s = std::min(group, n - s0);
      const Tensor v = empty(Shape{16, c, s * tiles}, like), m = empty(Shape{16, o, s * tiles}, like);
      be.winograd_input(v, narrow(x, 0, s0, s), w);
      be.winograd_output_backward(m, narrow(dy, 0, s0, s));
      // du[ξ] (O, C) (+)= m[ξ] (O, T) · v[ξ]ᵀ (T, C), the transpose a column-major view
      be.gemm(du, m, transpose(v, 1, 2), /*accumulate=*/g > strands.first(k));
    }
  });
  return transform_weight_backward(strands.total(partial));
}

Window2d window3x3(int64_t h, int64_t w, Size2 padding) {
  return {.in_h = h, .in_w = w, .kernel_h = 3, .kernel_w = 3, .pad_h = padding.h, .pad_w = padding.w};
}

}  // namespace

// Where it is used (bench/conv.sh; float32, one thread): 3x3, stride 1, no dilation or groups, and
// at least kMinChannels input and output channels. With few channels the GEMMs are too thin to
// gain (the CNN's first layer, 1 -> 32, runs faster as im2col: K = 9) and the transforms dominate.
// The input gradient's padding 2 - p must not be negative: p <= 2.
bool winograd_applies(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  constexpr int64_t kMinChannels = 16;
  // 16-bit layers take im2col (Note [Low-precision convolution]).
  return backend(x.device()).has_winograd() && !is_low_precision(x.dtype()) && w.size(2) == 3 && w.size(3) == 3 &&
         o.stride == Size2(1) && o.dilation == Size2(1) && o.groups == 1 && o.padding.h <= 2 && o.padding.w <= 2 &&
         w.size(0) >= kMinChannels && w.size(1) >= kMinChannels;
}

Tensor conv2d_winograd(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  MT_CHECK(winograd_applies(x, w, o), "conv2d_winograd: needs a 3x3 stride-1 convolution without dilation or "
           "groups, padding <= 2 and >= 16 channels on a backend with Winograd kernels; got weight ", w.sizes());
  const Window2d win = window3x3(x.size(2), x.size(3), o.padding);
  return winograd_conv(contiguous(x), transform_weight(w, false), b.defined() ? contiguous(b) : b, win);
}

Tensor conv2d_weight_grad_winograd(const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  MT_CHECK(winograd_applies(x, w, o), "conv2d_weight_grad_winograd: needs what conv2d_winograd needs; got weight ",
           w.sizes());
  if (x.size(0) == 0) return zeros(w.sizes(), {.dtype = w.dtype(), .device = w.device()});
  return winograd_weight_grad(contiguous(dy), contiguous(x), window3x3(x.size(2), x.size(3), o.padding));
}

Tensor conv2d_input_grad_winograd(const Tensor& dy, const Tensor& w, const Conv2dOptions& o) {
  MT_CHECK(winograd_applies(dy, w, o), "conv2d_input_grad_winograd: needs what conv2d_winograd needs; got weight ",
           w.sizes());
  const Window2d win = window3x3(dy.size(2), dy.size(3), {2 - o.padding.h, 2 - o.padding.w});
  return winograd_conv(contiguous(dy), transform_weight(w, true), Tensor(), win);
}

}  // namespace raw
}  // namespace mt
