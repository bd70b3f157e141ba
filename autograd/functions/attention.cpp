// scaled_dot_product_attention as a user calls it: the fused node (autograd/functions/transformer.cpp)
// where its kernels apply, and a composition of matmul, masked_fill and softmax where they do not:
// an attention mask, a value head size other than the query's, or 3-D inputs without a head dim.
#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "tensor/raw_ops.h"

namespace mt {

namespace detail {
// The one-node attention of the fused kernels: 4-D q, k, v of one head size, no mask other than causal.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options);
}  // namespace detail

namespace {

// Note [Attention masks]: minitrain has no bool dtype, so a mask's dtype says what it is, as
// PyTorch's does with bool against float: an int64 mask is boolean, nonzero where a query may attend
// to a key (PyTorch 1.13's F._scaled_dot_product_attention: True = takes part), and a floating mask
// is added to the scores before the softmax (-inf there is the same as 0 in an int64 mask). A row
// whose keys are all masked has no softmax: its output is NaN, as in PyTorch. The masked scores are
// the (B, H, Tq, Tk) matrix the fused kernels avoid, so a masked call costs that much memory, like
// PyTorch 1.13's own math path; causal alone stays fused.
// A boolean mask (and causal, when a mask comes with it) becomes an additive one first, 0 where a
// query may attend and -inf where not, at the mask's own (broadcast) size: adding it to the scores
// is one pass, and its backward hands the scores their gradient unchanged, where masked_fill's
// where costs a pass each way (PyTorch 2's math path does the same). The two differ only for a
// score of +inf or NaN under the mask, which masked_fill would have replaced.
Tensor additive_mask(const Tensor& q, const Tensor& k, const Tensor& mask, const AttentionOptions& options) {
  const double inf = std::numeric_limits<double>::infinity();
  const TensorOptions like{.dtype = q.dtype(), .device = q.device()};
  const Tensor zero = zeros(Shape{}, like), minus_inf = full(Shape{}, -inf, like);
  Tensor bias = mask;
  if (mask.dtype() == kInt64) bias = raw::where(mask, zero, minus_inf);
  if (options.causal) bias = bias + raw::where(raw::tril_mask(q.size(2), k.size(2), 0, q.device()), zero, minus_inf);
  return bias;
}

Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const AttentionOptions& options) {
  const double inf = std::numeric_limits<double>::infinity();
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  // q scaled rather than the scores: (Tq, d) multiplications instead of (Tq, Tk)
  Tensor scores = matmul(q * scale, transpose(k, -1, -2));  // (B, H, Tq, Tk)
  if (mask.defined()) {
    scores = scores + additive_mask(q, k, mask, options);
  } else if (options.causal) {  // dv != d without a mask
    const Tensor zero = zeros(Shape{}, {.dtype = kInt64, .device = q.device()});
    scores = masked_fill(scores, eq(raw::tril_mask(q.size(2), k.size(2), 0, q.device()), zero), -inf);
  }
  return matmul(softmax(scores, -1), v);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  return scaled_dot_product_attention(q, k, v, Tensor(), options);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask_in,
                                    const AttentionOptions& options) {
  const char* op = "scaled_dot_product_attention";
  // Under autocast in low precision, a floating mask too (Note [Autocast op lists]).
  const Tensor q = autocast::to_lower(q_in), k = autocast::to_lower(k_in), v = autocast::to_lower(v_in),
               attn_mask = autocast::to_lower(mask_in);
  MT_CHECK((q.dim() == 4 || q.dim() == 3) && k.dim() == q.dim() && v.dim() == q.dim(), op,
           ": q, k, v must all be 4-D (B, H, T, d) or all 3-D (H, T, d), got ", q.sizes(), ", ", k.sizes(), ", ",
           v.sizes());
  if (q.dim() == 3) {  // one batch of H heads; a mask broadcasts the same against (1, H, Tq, Tk)
    return squeeze(scaled_dot_product_attention(unsqueeze(q, 0), unsqueeze(k, 0), unsqueeze(v, 0), attn_mask, options), 0);
  }
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3), Tk = k.size(2), dv = v.size(3);
  MT_CHECK(k.sizes() == Shape({B, H, Tk, d}) && v.sizes() == Shape({B, H, Tk, dv}), op, ": k ", k.sizes(), " and v ",
           v.sizes(), " must be (", B, ", ", H, ", Tk, ", d, ") and (", B, ", ", H, ", Tk, dv) for q ", q.sizes());
  if (!attn_mask.defined() && dv == d) return detail::fused_attention(q, k, v, options);
  if (attn_mask.defined()) {
    const Shape scores{B, H, Tq, Tk};
    bool fits = attn_mask.dim() <= 4;
    for (int i = 1; fits && i <= attn_mask.dim(); ++i)
      fits = attn_mask.size(-i) == 1 || attn_mask.size(-i) == scores[4 - i];
    MT_CHECK(fits, op, ": attn_mask ", attn_mask.sizes(), " must broadcast to the scores' shape ", scores);
    MT_CHECK(attn_mask.device() == q.device(), op, ": attn_mask is on ", attn_mask.device(), " but q on ", q.device());
  }
  return composed_attention(q, k, v, attn_mask, options);
}

}  // namespace mt
