// The obviously correct compositions of the fused ops: layer norm, GELU and attention (autograd/ops.h)
// written with the elementwise, reduction, matmul and softmax ops they replace, group norm as layer
// norm over the groups and a broadcast affine map, and bilinear interpolate (autograd/spatial_ops.h)
// as index_select passes.
// Tests compare the fused ops with these, values and gradients; benchmarks time them side by side.
// Not for models to call: each costs several nodes and temporaries where the fused op costs one.
#pragma once

#include "autograd/ops.h"
#include "autograd/spatial_ops.h"

namespace mt::reference {

// mean = x.mean(-1); var = ((x - mean)²).mean(-1); (x - mean)/√(var + eps)·weight + bias
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// layer_norm (no affine) over the rows of x reshaped to (N, G, (C/G)·Π*), reshaped back, then
// ·weight and +bias broadcast per channel (dim 1); undefined ones are skipped. Also group_norm's
// path on a backend without the kernel (Note [Group norm by a kernel]).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// 0.5·x·(1 + erf(x/√2)), or 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
// softmax(masked_fill(scale·q·kᵀ, j > i, -inf), -1)·v: the (B, H, Tq, Tk) matrix made explicitly.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});
// interpolate without the backend's bilinear kernel: every mode composed from index_select
// (Note [Bilinear by a kernel] in autograd/functions/interpolate.cpp).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace mt::reference
