// MultiheadAttention: self-attention with `heads` heads over inputs of width dim, the GPT-2 layout:
//   qkv = x·W_qkvᵀ + b_qkv          x: (B, T, dim)  qkv: (B, T, 3·dim) = [q | k | v]
//   q, k, v = per-head views        (B, H, T, d), d = dim/H: narrow + view + transpose, no copy
//   a = scaled_dot_product_attention(q, k, v, causal)     (B, H, T, d), one fused op
//   y = merge(a)·W_projᵀ + b_proj   (B, T, dim)
// The one fused projection (child "qkv") makes one GEMM of three; "proj" is the output projection.
// The parameter layout is GPT-2's c_attn/c_proj (as nn.Linear), not torch.nn.MultiheadAttention's
// in_proj_weight, which also expects (T, B, dim) inputs by default.
//
// Not here: cross-attention (separate key/value inputs), attention masks other than causal,
// dropout on the attention weights, key/value caches for generation.
#pragma once

#include "nn/linear.h"
#include "nn/module.h"

namespace mt::nn {

struct MultiheadAttentionOptions {
  bool causal = false;  // position t attends to positions <= t only
  bool bias = true;     // biases in both projections
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t dim, int64_t heads, MultiheadAttentionOptions options = {});

  // x: (B, T, dim) -> (B, T, dim)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t dim, heads;
  const MultiheadAttentionOptions options;
  std::shared_ptr<Linear> qkv;   // dim -> 3·dim
  std::shared_ptr<Linear> proj;  // dim -> dim
};

}  // namespace mt::nn
