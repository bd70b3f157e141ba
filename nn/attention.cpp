// MultiheadAttention: the fused qkv projection, the per-head views, fused attention, and the merge.
#include "nn/attention.h"

#include <limits>
#include <vector>

#include "autograd/ops.h"

namespace mt::nn {

MultiheadAttention::MultiheadAttention(int64_t dim, int64_t heads, MultiheadAttentionOptions options)
    : dim(dim), heads(heads), options(options) {
  MT_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "MultiheadAttention: heads (", heads,
           ") must be positive and divide dim (", dim, ")");
  qkv = register_module("qkv", std::make_shared<Linear>(dim, 3 * dim, LinearOptions{.bias = options.bias}));
  proj = register_module("proj", std::make_shared<Linear>(dim, dim, LinearOptions{.bias = options.bias}));
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, {}); }

namespace {

// An int64 mask (nonzero = may not attend) as 0 / -inf in dtype; a floating one as it is.
Tensor additive(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kInt64) return mask;
  const TensorOptions like{.dtype = dtype, .device = mask.device()};
  return masked_fill(zeros(mask.sizes(), like), mask, -std::numeric_limits<double>::infinity());
}

}  // namespace

// Both masks become one additive (B, H, T, T)-broadcastable mask for scaled_dot_product_attention.
Tensor MultiheadAttention::forward(const Tensor& x, const AttentionMasks& masks) {
  MT_CHECK(x.dim() == 3 && x.size(2) == dim, "MultiheadAttention(dim=", dim, ", heads=", heads,
           "): input must be (B, T, ", dim, "), got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), d = dim / heads;
  // (B, T, 3·dim) as (B, T, 3·H, d), split into q, k, v of (B, T, H, d): one backward node writes
  // their gradients into one buffer (Note [One gradient for split pieces]). Split after the view,
  // not before: the pieces' gradients arrive as transposed views, and split's backward copies
  // those straight into its buffer; a view of each piece would first need them contiguous (a
  // second copy of the qkv gradient per layer).
  const std::vector<Tensor> parts = split(qkv->forward(x).view({B, T, 3 * heads, d}), heads, 2);
  // Part p of [q | k | v] as (B, H, T, d): a view with strides (T·3·dim, d, 3·dim, 1).
  const auto head_view = [&](int64_t p) { return parts[p].transpose(1, 2); };
  Tensor mask;
  if (masks.key_padding_mask.defined()) {
    MT_CHECK(masks.key_padding_mask.sizes() == Shape({B, T}), "MultiheadAttention: key_padding_mask must be (", B,
             ", ", T, "), got ", masks.key_padding_mask.sizes());
    mask = additive(masks.key_padding_mask, x.dtype()).reshape({B, 1, 1, T});
  }
  if (masks.attn_mask.defined()) {
    const Tensor& m = masks.attn_mask;
    MT_CHECK(m.sizes() == Shape({T, T}) || m.sizes() == Shape({B * heads, T, T}), "MultiheadAttention: attn_mask must "
             "be (", T, ", ", T, ") or (", B * heads, ", ", T, ", ", T, "), got ", m.sizes());
    const Tensor a = additive(m, x.dtype()).reshape({m.dim() == 2 ? 1 : B, m.dim() == 2 ? 1 : heads, T, T});
    mask = mask.defined() ? mask + a : a;
  }
  const Tensor a = scaled_dot_product_attention(head_view(0), head_view(1), head_view(2), mask,
                                                {.causal = options.causal});
  // (B, H, T, d) -> (B, T, H, d) -> (B, T, dim): the one copy, to give the projection its rows.
  return proj->forward(a.transpose(1, 2).reshape({B, T, dim}));
}

std::string MultiheadAttention::extra_repr() const {
  return "dim=" + std::to_string(dim) + ", heads=" + std::to_string(heads) +
         ", causal=" + (options.causal ? "true" : "false");
}

}  // namespace mt::nn
