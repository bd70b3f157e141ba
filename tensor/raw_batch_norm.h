// raw::batch_norm_stats, batch_norm_relu and batch_norm_relu_backward: the shapes and checks around the
// backends' fused batch-norm kernels (Backend::batch_norm_relu, tensor/backend.h), for the one node of
// mt::batch_norm_relu (autograd/functions/batch_norm_relu.cpp). No autograd here.
#pragma once

#include <optional>

#include "tensor/tensor.h"
#include "tensor/window.h"

namespace mt::raw {

// The fused kernels take x: float32 or float64, (N, C, H, W), on a backend that has them
// (has_batch_norm_relu), and a pool (when set) whose windows lie inside the plane: no padding, no
// dilation, no ceil_mode. Elsewhere batch_norm_relu is composed from its ops.
bool batch_norm_relu_applies(const Tensor& x, const std::optional<Pool2dOptions>& pool);

// Per channel (dim 1) of x: (N, C, H, W): the mean and the biased variance over the other dims, (C) each.
struct BatchNormMoments {
  Tensor mean, var;
};
BatchNormMoments batch_norm_stats(const Tensor& x);

// y = max((x - mean)·scale + shift, 0) per channel; out = y (N, C, H, W), or max_pool2d(y, pool)
// (N, C, OH, OW) with its int64 indices (h·W + w within each plane; undefined without pool).
// mean, scale, shift: (C) in x's dtype.
struct BatchNormReluResult {
  Tensor out, indices;
};
BatchNormReluResult batch_norm_relu(const Tensor& x, const Tensor& mean, const Tensor& scale, const Tensor& shift,
                                    const std::optional<Pool2dOptions>& pool);

// The backward of batch_norm_relu (the formulas at Backend::batch_norm_relu_backward): dout and out like
// batch_norm_relu's out, indices its indices; inv = 1/√(var + eps), (C). batch_stats: mean and var were
// the batch's own (training), so the gradient flows through them too.
struct BatchNormReluGrads {
  Tensor dx, dweight, dbias;  // (N, C, H, W), (C), (C)
};
BatchNormReluGrads batch_norm_relu_backward(const Tensor& dout, const Tensor& out, const Tensor& indices,
                                            const Tensor& x, const Tensor& mean, const Tensor& inv,
                                            const Tensor& scale, const std::optional<Pool2dOptions>& pool,
                                            bool batch_stats);

}  // namespace mt::raw
