// Differentiable transformer ops: the fused layer_norm, gelu and attention (one node each, backward
// by the fused kernels of tensor/raw_transformer.cpp), and embedding, masked_fill and tril, which compose existing differentiable ops and so need no node of their own.
// The compositions the fused ops replace are in reference_ops.cpp; tests compare the two.
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

struct LayerNormBackward final : Node {
  SavedTensor x, weight, mean, rstd;
  // y = x̂·w + b, x̂ = (x - mean)·rstd   =>   dx = rstd·(g - mean(g) - x̂·mean(g·x̂)) with g = dy·w,
  //                                          dw = Σ_rows dy·x̂,  db = Σ_rows dy
  TensorList apply(TensorList&& g) override {
    check_not_released();
    raw::LayerNormGrads d = raw::layer_norm_backward(g[0], x.unpack(*this), weight.unpack(*this),
                                                     mean.unpack(*this), rstd.unpack(*this));
    // An undefined weight or bias has no edge (record skips it): no gradient goes there.
    return {d.dx, next_edges[1].valid() ? d.dweight : Tensor(), next_edges[2].valid() ? d.dbias : Tensor()};
  }
  void release_saved() override { x.reset(), weight.reset(), mean.reset(), rstd.reset(), Node::release_saved(); }
  std::string name() const override { return "LayerNormBackward"; }
};

struct GeluBackward final : Node {
  SavedTensor x;
  GeluApproximate approximate = GeluApproximate::None;
  // y = GELU(x)   =>   dx = dy·GELU'(x)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    return {raw::gelu_backward(g[0], x.unpack(*this), approximate)};
  }
  void release_saved() override { x.reset(), Node::release_saved(); }
  std::string name() const override { return "GeluBackward"; }
};

struct AttentionBackward final : Node {
  SavedTensor q, k, v, out, lse;
  AttentionParams params;
  // out = softmax(scale·q·kᵀ)·v   =>   with p = softmax(...), D_i = dout_i·out_i, ds = p·(dout·vᵀ - D):
  //   dq = scale·ds·k,  dk = scale·dsᵀ·q,  dv = pᵀ·dout       (p is rebuilt from lse, never stored)
  TensorList apply(TensorList&& g) override {
    check_not_released();
    raw::AttentionGrads d = raw::scaled_dot_product_attention_backward(
        g[0], q.unpack(*this), k.unpack(*this), v.unpack(*this), out.unpack(*this), lse.unpack(*this), params);
    return {d.dq, d.dk, d.dv};
  }
  void release_saved() override {
    q.reset(), k.reset(), v.reset(), out.reset(), lse.reset(), Node::release_saved();
  }
  std::string name() const override { return "ScaledDotProductAttentionBackward"; }
};

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  // In float32 under autocast (Note [Autocast op lists]).
  const Tensor x = autocast::to_float32(x_in), weight = autocast::to_float32(weight_in),
               bias = autocast::to_float32(bias_in);
  raw::LayerNormResult r = raw::layer_norm(x, weight, bias, eps);
  if (auto node = record<LayerNormBackward>({&x, &weight, &bias})) {
    node->x = SavedTensor(x), node->weight = SavedTensor(weight);
    node->mean = SavedTensor(r.mean), node->rstd = SavedTensor(r.rstd);
    set_history(r.out, node);
  }
  return r.out;
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  Tensor y = raw::gelu(x, approximate);
  if (auto node = record<GeluBackward>({&x})) {
    node->x = SavedTensor(x), node->approximate = approximate;
    set_history(y, node);
  }
  return y;
}

namespace detail {

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  raw::AttentionResult r = raw::scaled_dot_product_attention(q, k, v, options);
  if (auto node = record<AttentionBackward>({&q, &k, &v})) {
    node->q = SavedTensor(q), node->k = SavedTensor(k), node->v = SavedTensor(v);
    node->out = SavedTensor(r.out), node->lse = SavedTensor(r.lse);
    node->params = raw::attention_params(q, options);
    set_history(r.out, node);
  }
  return r.out;
}

}  // namespace detail

// weight[indices]: index_select's backward is index_add, which sums the rows of repeated indices.
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  MT_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.sizes());
  MT_CHECK(indices.dtype() == kInt64, "embedding: indices must be int64, got ", indices.dtype());
  Shape shape = indices.sizes();
  shape.push_back(weight.size(1));
  return view(index_select(weight, 0, raw::reshape(indices, Shape{-1})), shape);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return where(mask, scalar_tensor(value, {.dtype = x.dtype(), .device = x.device()}), x);
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  MT_CHECK(x.dim() >= 2, "tril: input must have at least 2 dims, got ", x.sizes());
  const Tensor keep = raw::tril_mask(x.size(-2), x.size(-1), diagonal, x.device());
  return where(keep, x, zeros(Shape{}, {.dtype = x.dtype(), .device = x.device()}));
}

}  // namespace mt
