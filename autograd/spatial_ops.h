// The differentiable spatial ops beyond conv2d and pooling (autograd/ops.h has those): padding,
// resampling, 1-D and transposed convolution, adaptive max pooling, as PyTorch's F.pad,
// F.interpolate, F.conv1d, F.conv_transpose2d and F.adaptive_max_pool2d.
//
//   Tensor y = mt::pad(x, {1, 1, 2, 0}, {.mode = PadMode::Reflect});  // last dim 1|1, the one before 2|0
//   Tensor up = mt::interpolate(x, {.scale_factor = 2, .mode = InterpolateMode::Bilinear});
//
// pad, interpolate, conv1d and adaptive_max_pool2d are compositions of index_select, gather, cat and
// conv2d, so they run on every backend with no kernel and no backward of their own; conv_transpose2d
// is one node over conv2d's raw backward (autograd/functions/conv_transpose.cpp).
//
// What they do not do: interpolate's bicubic, area and trilinear modes, 3-D and 5-D inputs, and
// antialias; conv_transpose2d's output_padding >= stride (PyTorch also allows < dilation); 3-D
// convolutions and pooling.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/window.h"

namespace mt {

// ---- padding (autograd/functions/pad.cpp) -----------------------------------------------------
enum class PadMode : uint8_t {
  Constant,   // `value` outside the input
  Reflect,    // mirrored about the edge element, which is not repeated: pad < size
  Replicate,  // the edge element repeated
  Circular,   // wrapped around from the other end: pad <= size
};
struct PadOptions {
  PadMode mode = PadMode::Constant;
  double value = 0.0;  // Constant only
};
// pads = (left, right) for the last dim, then (left, right) for the one before, ..., as F.pad: at
// most x.dim() pairs. Constant pads any dims, and a negative pad crops. The other modes pad the
// last 1, 2 or 3 dims of an input with 1 or 2 dims more (batch and channel, or channel only), and
// take pads >= 0.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadOptions options = {});

// ---- 1-D and transposed convolution (autograd/functions/conv_transpose.cpp) --------------------
struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
// x: (N, C, L) or (C, L)  w: (O, C/groups, k)  b: (O) or undefined  ->  (N, O, OL) or (O, OL).
// conv2d over a unit height: the same multiply-adds, in the same order.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const Conv1dOptions& options = {});

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;         // taken off each side of the full output
  Size2 output_padding = 0;  // added to one side (bottom, right) of the output; < stride
  int64_t groups = 1;
  Size2 dilation = 1;
};
// The adjoint of conv2d in its input: x: (N, C, H, W) or (C, H, W)  w: (C, O/groups, kh, kw)  b: (O)
//   ->  (N, O, OH, OW),  OH = (H - 1)·stride - 2·padding + dilation·(kh - 1) + output_padding + 1 (OW alike).
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        const ConvTranspose2dOptions& options = {});

// ---- adaptive max pooling (autograd/functions/adaptive_max_pool.cpp) ----------------------------
// PyTorch's adaptive bins (cell i of n covers [floor(i·H/n), ceil((i+1)·H/n)) per dim), the maximum of
// each. x: (N, C, H, W) or (C, H, W). The indices are h·W + w within each plane, int64, as
// max_pool2d_with_indices's; the gradient goes to that element only.
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Size2 output_size);
Tensor adaptive_max_pool2d(const Tensor& x, Size2 output_size);

// ---- resampling (autograd/functions/interpolate.cpp) -------------------------------------------
enum class InterpolateMode : uint8_t { Nearest, Bilinear };
// A scale per dim; one number for both.
struct Scale2 {
  double h = 0, w = 0;
  constexpr Scale2() = default;
  constexpr Scale2(double both) : h(both), w(both) {}  // NOLINT: implicit, as Size2
  constexpr Scale2(double h_, double w_) : h(h_), w(w_) {}
};
// Exactly one of size and scale_factor. A scale_factor gives the size floor(in·scale) and, as
// PyTorch's default recompute_scale_factor=None, the source positions use 1/scale itself.
struct InterpolateOptions {
  Size2 size = 0;
  Scale2 scale_factor = 0.0;
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;  // Bilinear only: corner pixels' centres map onto each other
};
// x: (N, C, H, W) -> (N, C, OH, OW), as F.interpolate.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace mt
