// MultiheadAttention: the fused qkv projection, the per-head views, fused attention, and the merge.
#include "nn/attention.h"

#include "autograd/ops.h"

namespace mt::nn {

MultiheadAttention::MultiheadAttention(int64_t dim, int64_t heads, MultiheadAttentionOptions options)
    : dim(dim), heads(heads), options(options) {
  MT_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "MultiheadAttention: heads (", heads,
           ") must be positive and divide dim (", dim, ")");
  qkv = register_module("qkv", std::make_shared<Linear>(dim, 3 * dim, LinearOptions{.bias = options.bias}));
  proj = register_module("proj", std::make_shared<Linear>(dim, dim, LinearOptions{.bias = options.bias}));
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 3 && x.size(2) == dim, "MultiheadAttention(dim=", dim, ", heads=", heads,
           "): input must be (B, T, ", dim, "), got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), d = dim / heads;
  const Tensor qkv_out = qkv->forward(x);  // (B, T, 3·dim)
  // Part p of [q | k | v] as (B, H, T, d): a view with strides (T·3·dim, d, 3·dim, 1).
  const auto head_view = [&](int64_t p) { return qkv_out.narrow(2, p * dim, dim).view({B, T, heads, d}).transpose(1, 2); };
  const Tensor a = scaled_dot_product_attention(head_view(0), head_view(1), head_view(2), {.causal = options.causal});
  // (B, H, T, d) -> (B, T, H, d) -> (B, T, dim): the one copy, to give the projection its rows.
  return proj->forward(a.transpose(1, 2).reshape({B, T, dim}));
}

std::string MultiheadAttention::extra_repr() const {
  return "dim=" + std::to_string(dim) + ", heads=" + std::to_string(heads) +
         ", causal=" + (options.causal ? "true" : "false");
}

}  // namespace mt::nn
