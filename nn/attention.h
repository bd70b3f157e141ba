// MultiheadAttention: self-attention with `heads` heads over inputs of width dim, the GPT-2 layout:
//   qkv = x·W_qkvᵀ + b_qkv          x: (B, T, dim)  qkv: (B, T, 3·dim) = [q | k | v]
//   q, k, v = per-head views        (B, H, T, d), d = dim/H: narrow + view + transpose, no copy
//   a = scaled_dot_product_attention(q, k, v, causal)     (B, H, T, d), one fused op (composed with masks)
//   y = merge(a)·W_projᵀ + b_proj   (B, T, dim)
// The one fused projection (child "qkv") makes one GEMM of three; "proj" is the output projection.
// The parameter layout is GPT-2's c_attn/c_proj (as nn.Linear), not torch.nn.MultiheadAttention's
// in_proj_weight, which also expects (T, B, dim) inputs by default.
//
// forward(x, masks) takes torch.nn.MultiheadAttention's masks with its conventions (the reverse of
// scaled_dot_product_attention's boolean mask): an int64 mask is boolean, nonzero = may NOT attend;
// a floating one is added to the scores. Both given: a key is ignored if either says so.
//
// Not here: cross-attention (separate key/value inputs), dropout on the attention weights,
// key/value caches for generation.
#pragma once

#include "nn/linear.h"
#include "nn/module.h"

namespace mt::nn {

struct MultiheadAttentionOptions {
  bool causal = false;  // position t attends to positions <= t only
  bool bias = true;     // biases in both projections
};

struct AttentionMasks {
  Tensor key_padding_mask{};  // (B, T): int64 nonzero = that key is padding; or floating, added
  Tensor attn_mask{};         // (T, T) or (B·H, T, T): int64 nonzero = query t may not see key s; or floating
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t dim, int64_t heads, MultiheadAttentionOptions options = {});

  // x: (B, T, dim) -> (B, T, dim)
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const AttentionMasks& masks);
  std::string extra_repr() const override;

  const int64_t dim, heads;
  const MultiheadAttentionOptions options;
  std::shared_ptr<Linear> qkv;   // dim -> 3·dim
  std::shared_ptr<Linear> proj;  // dim -> dim
};

}  // namespace mt::nn
