// The options of the 2-D sliding-window ops (unfold/fold, conv2d, max/avg pooling), shared by the raw
// ops (tensor/raw_ops.h), the differentiable ops (autograd/ops.h) and the layers (nn/conv.h,
// nn/pooling.h). A size is one number for both dims or an (h, w) pair, as in PyTorch:
//   mt::conv2d(x, w, b, {.stride = 2, .padding = 1});
//   mt::max_pool2d(x, {.kernel_size = {2, 3}});
// Backend kernels get the resolved geometry instead, a Window2d (tensor/backend.h).
#pragma once

#include <cstdint>
#include <ostream>

namespace mt {

struct Size2 {
  int64_t h = 0, w = 0;
  constexpr Size2() = default;
  constexpr Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit, so `.stride = 2` reads naturally
  constexpr Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  constexpr bool operator==(const Size2&) const = default;
};
inline std::ostream& operator<<(std::ostream& os, Size2 s) { return os << s.h << "x" << s.w; }

// Convolution: x (N, C, H, W) * weight (O, C/groups, kh, kw) -> (N, O, OH, OW).
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;   // zeros on each side
  Size2 dilation = 1;  // spacing between kernel taps
  int64_t groups = 1;  // C and O split into `groups` independent convolutions
};

// unfold (im2col) and fold (col2im), as torch.nn.functional.unfold / fold.
struct UnfoldOptions {
  Size2 kernel_size;
  Size2 dilation = 1;
  Size2 padding = 0;
  Size2 stride = 1;
};

// Max and average pooling. stride 0 means "the kernel size" (PyTorch's default, stride=None).
struct Pool2dOptions {
  Size2 kernel_size;
  Size2 stride = 0;
  Size2 padding = 0;             // at most half the kernel; max pooling pads with -inf
  Size2 dilation = 1;            // max pooling only
  bool count_include_pad = true; // average pooling: divide by the window's part inside the padded input
  bool ceil_mode = false;        // output sizes round up (Note [Pooling ceil_mode] in tensor/backend.h)
};

}  // namespace mt
