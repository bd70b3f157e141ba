// Convolution over the whole batch at once: one im2col launch, one batched GEMM, one col2im launch
// per op, where raw_conv.cpp's loop (Note [Convolution one sample at a time]) makes N of each. The
// CUDA backend takes this path (each launch costs microseconds of host time there, and one GEMM over
// N·groups matrices fills the GPU where one sample's may not); the CPU keeps the per-sample loop,
// whose column buffer stays in cache. Internal to tensor/: raw::conv2d and raw::conv2d_backward
// decide which path runs, after checking their arguments.
#pragma once

#include "tensor/raw_ops.h"

namespace mt::raw::detail {

// The sizes of a checked convolution (C = groups·Cg input channels, O = groups·Og outputs,
// K = Cg·kh·kw, L = OH·OW), as raw_conv.cpp's conv_dims computes them.
struct ConvDims {
  int64_t n, c, o, groups, cg, og, k, l;
  Window2d w;
};

// The devices whose convolutions run batched: CUDA devices.
bool conv_runs_batched(Device device);

// y = conv2d(x, w, b): x (N, C, H, W) and w (O, Cg, kh, kw) contiguous, b (O) or undefined.
Tensor conv2d_batched(const Tensor& x, const Tensor& w, const Tensor& b, const ConvDims& d);
// The same gradients as raw::conv2d_backward; dy (N, O, OH, OW), x and w contiguous.
Conv2dGrads conv2d_backward_batched(const Tensor& dy, const Tensor& x, const Tensor& w, const ConvDims& d,
                                    Conv2dNeeds needs);

}  // namespace mt::raw::detail
